package server

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/httplimit"
)

// POST /v1/leases/acquire, /v1/leases/renew and /v1/leases/release: the
// leases of in_flight policies (sluice.InFlight).

// leaseRequest is the body of the three lease routes: acquire takes
// policy and key, renew and release the lease too.
type leaseRequest struct {
	Policy string `json:"policy"`
	Key    string `json:"key"`
	Lease  string `json:"lease"`
}

// AcquireResult is the answer to POST /v1/leases/acquire.
type AcquireResult struct {
	Allowed bool `json:"allowed"`
	// Lease is the opaque id to renew and release the lease with.
	Lease     string `json:"lease,omitempty"`
	Limit     int64  `json:"limit"`
	Remaining int64  `json:"remaining"`
	// ExpiresInMS is when the lease ends unless renewed or released.
	ExpiresInMS int64 `json:"expires_in_ms,omitempty"`
	// RetryAfterMS is, on a refusal, when the earliest current lease ends
	// at the latest (a release may free a slot sooner).
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
	Degraded     bool  `json:"degraded"`
	Shadow       bool  `json:"shadow"`
}

// decodeLease reads a lease route's body and resolves its in_flight
// policy; withLease: the lease is required (renew, release).
func (s *Server) decodeLease(w http.ResponseWriter, r *http.Request, withLease bool) (*policy, leaseRequest, error) {
	var req leaseRequest
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, req, bad(http.StatusRequestEntityTooLarge, "the body is larger than %d bytes", s.opts.MaxBodyBytes)
		}
		return nil, req, bad(http.StatusBadRequest, "reading the body: %v", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, req, bad(http.StatusBadRequest, `the body is empty; send {"policy":"...","key":"..."}`)
	}
	if err := decodeStrict(data, &req); err != nil {
		return nil, req, err
	}
	switch {
	case req.Policy == "":
		return nil, req, bad(http.StatusBadRequest, "policy is missing")
	case req.Key == "":
		return nil, req, bad(http.StatusBadRequest, "key is missing or empty")
	case len(req.Key) > MaxKeyLen:
		return nil, req, bad(http.StatusBadRequest, "key is %d bytes; at most %d are accepted", len(req.Key), MaxKeyLen)
	case withLease && req.Lease == "":
		return nil, req, bad(http.StatusBadRequest, "lease is missing (the id POST /v1/leases/acquire gave)")
	case !withLease && req.Lease != "":
		return nil, req, bad(http.StatusBadRequest, "lease is not for acquire (it gives a new one)")
	}
	p, err := s.state.Load().policy(req.Policy, "")
	if err != nil {
		return nil, req, err
	}
	if p.cfg.Algorithm != driver.AlgorithmInFlight {
		return nil, req, bad(http.StatusBadRequest, "policy %q is %v, not in_flight: leases are for in_flight policies (use POST /v1/check)", p.cfg.Name, p.cfg.Algorithm)
	}
	return p, req, nil
}

// lease returns the lease req names, or a 400 for a malformed id.
func (p *policy) lease(req leaseRequest) (*sluice.Lease, error) {
	ls, err := p.limiter.Lease(req.Key, req.Lease)
	if err != nil {
		return nil, bad(http.StatusBadRequest, "lease: %s", sluice.Reason(err))
	}
	return ls, nil
}

// handleAcquire is POST /v1/leases/acquire: a lease, or 429 with
// Retry-After.
func (s *Server) handleAcquire(w http.ResponseWriter, r *http.Request) {
	p, req, err := s.decodeLease(w, r, false)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ls, res, err := p.limiter.Acquire(r.Context(), req.Key)
	if err != nil {
		s.fail(w, r, s.decisionError(err, p))
		return
	}
	s.refused.note(p.cfg, req.Key, res)
	out := AcquireResult{Allowed: res.Allowed, Limit: res.Limit, Remaining: res.Remaining, Degraded: res.Degraded, Shadow: res.Shadowed}
	if ls == nil {
		out.RetryAfterMS = ceilMS(res.RetryAfter)
		w.Header().Set("Retry-After", strconv.FormatInt(httplimit.RetryAfterSeconds(res.RetryAfter), 10))
		writeJSON(w, http.StatusTooManyRequests, out)
		return
	}
	out.Lease, out.ExpiresInMS = ls.ID(), ceilMS(p.limiter.Rule().Window)
	writeJSON(w, http.StatusOK, out)
}

// handleRenew is POST /v1/leases/renew: 200 with the time left, or 410
// when the lease had ended.
func (s *Server) handleRenew(w http.ResponseWriter, r *http.Request) {
	p, req, err := s.decodeLease(w, r, true)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ls, err := p.lease(req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := ls.Renew(r.Context()); err != nil {
		if errors.Is(err, sluice.ErrLeaseLost) {
			problem(w, http.StatusGone, "the lease had ended (released, expired or reset): acquire a new one")
			return
		}
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int64{"expires_in_ms": ceilMS(p.limiter.Rule().Window)})
}

// handleRelease is POST /v1/leases/release: released true, or false when
// the lease had already ended (not an error).
func (s *Server) handleRelease(w http.ResponseWriter, r *http.Request) {
	p, req, err := s.decodeLease(w, r, true)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ls, err := p.lease(req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ok, err := ls.Release(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"released": ok})
}
