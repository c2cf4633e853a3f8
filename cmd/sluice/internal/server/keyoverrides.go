package server

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
)

// Key overrides, behind the admin token:
//
//	PUT    /v1/overrides/{policy}/{key}   set: {"limit":..., "expires":RFC 3339,
//	                                      "window" or "rate" optional, "reason", "actor"}
//	GET    /v1/overrides/{policy}/{key}   read (404 when the key has none)
//	DELETE /v1/overrides/{policy}/{key}   remove
//	GET    /v1/overrides/{policy}         list the policy's live overrides
//
// The policy must say overrides: true (409 otherwise). The routes are in
// the route table (routes.go).

// The longest reason and actor of an override, in bytes.
const (
	MaxOverrideReason = 1024
	MaxOverrideActor  = 256
)

// overrideBody is the JSON of an override, in and out.
type overrideBody struct {
	Policy  string  `json:"policy,omitempty"`
	Key     string  `json:"key,omitempty"`
	Limit   int64   `json:"limit"`
	Window  string  `json:"window,omitempty"`
	Rate    string  `json:"rate,omitempty"`
	Expires string  `json:"expires"`
	Reason  string  `json:"reason,omitempty"`
	Actor   string  `json:"actor,omitempty"`
	Set     *string `json:"set,omitempty"`
}

func (s *Server) overridePolicy(r *http.Request) (*policy, error) {
	p, err := s.state.Load().policy(r.PathValue("policy"), "")
	if err != nil {
		return nil, err
	}
	if !p.cfg.Overrides {
		return nil, bad(http.StatusConflict, "policy %q does not read key overrides (set overrides: true in its configuration)", p.cfg.Name)
	}
	return p, nil
}

func (s *Server) overrideRoute(r *http.Request) (*policy, string, error) {
	p, err := s.overridePolicy(r)
	if err != nil {
		return nil, "", err
	}
	key := r.PathValue("key")
	if key == "" || len(key) > MaxKeyLen {
		return nil, "", bad(http.StatusBadRequest, "key must be 1 to %d bytes", MaxKeyLen)
	}
	return p, key, nil
}

// parseOverride decodes a PUT body strictly (decodeStrict) into a
// sluice.Override.
func parseOverride(data []byte) (sluice.Override, error) {
	var b overrideBody
	if err := decodeStrict(data, &b); err != nil {
		return sluice.Override{}, err
	}
	if b.Set != nil || b.Policy != "" || b.Key != "" {
		return sluice.Override{}, bad(http.StatusBadRequest, "policy, key and set are not set by the body (the path names the policy and key)")
	}
	o := sluice.Override{Limit: b.Limit, Reason: b.Reason, Actor: b.Actor}
	if b.Limit <= 0 {
		return o, bad(http.StatusBadRequest, "limit is missing or not positive (got %d)", b.Limit)
	}
	exp, err := parseExpires(b.Expires)
	if err != nil {
		return o, err
	}
	o.Expires = exp
	if err := parseOverrideShape(&o, b); err != nil {
		return o, err
	}
	return o, checkOverrideText(o)
}

// parseExpires reads an override's expiry, which it must have: an RFC
// 3339 time.
func parseExpires(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, bad(http.StatusBadRequest, "expires is missing: an override lapses by itself (RFC 3339, such as 2030-01-31T00:00:00Z)")
	}
	exp, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, bad(http.StatusBadRequest, "expires: %q is not an RFC 3339 time (such as 2030-01-31T00:00:00Z)", v)
	}
	return exp, nil
}

// checkOverrideText refuses an override's reason or actor over its bound.
func checkOverrideText(o sluice.Override) error {
	if len(o.Reason) > MaxOverrideReason || len(o.Actor) > MaxOverrideActor {
		return bad(http.StatusBadRequest, "reason is at most %d bytes and actor at most %d", MaxOverrideReason, MaxOverrideActor)
	}
	return nil
}

// parseOverrideShape sets the override's own window and rate from the
// body, when it gives them.
func parseOverrideShape(o *sluice.Override, b overrideBody) error {
	var err error
	if b.Window != "" {
		if o.Window, err = config.ParseDuration(b.Window); err != nil {
			return bad(http.StatusBadRequest, "window: %v", err)
		}
	}
	if b.Rate != "" {
		if o.Rate, o.Per, err = config.ParseRate(b.Rate); err != nil {
			return bad(http.StatusBadRequest, "rate: %v", err)
		}
	}
	return nil
}

func toOverrideBody(policy, key string, o sluice.Override) overrideBody {
	b := overrideBody{Policy: policy, Key: key, Limit: o.Limit, Expires: o.Expires.UTC().Format(time.RFC3339Nano), Reason: o.Reason, Actor: o.Actor}
	if o.Window != 0 {
		b.Window = o.Window.String()
	}
	if o.Rate != 0 {
		b.Rate = rateString(o.Rate, o.Per)
	}
	set := o.Set.UTC().Format(time.RFC3339Nano)
	b.Set = &set
	return b
}

func (s *Server) handleOverridePut(w http.ResponseWriter, r *http.Request) {
	p, key, err := s.overrideRoute(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		s.fail(w, r, bad(http.StatusRequestEntityTooLarge, "the body is larger than %d bytes", s.opts.MaxBodyBytes))
		return
	}
	o, err := parseOverride(data)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := p.limiter.SetOverride(r.Context(), key, o); err != nil {
		if errors.Is(err, sluice.ErrInvalidOverride) {
			s.fail(w, r, bad(http.StatusBadRequest, "%v", err))
			return
		}
		s.fail(w, r, s.decisionError(err, p))
		return
	}
	s.log.Info("key override set", "policy", p.cfg.Name, "key", key, "limit", o.Limit, "expires", o.Expires,
		"reason", o.Reason, "actor", o.Actor, "remote", r.RemoteAddr)
	s.handleOverrideGet(w, r)
}

func (s *Server) handleOverrideGet(w http.ResponseWriter, r *http.Request) {
	p, key, err := s.overrideRoute(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	o, ok, err := p.limiter.GetOverride(r.Context(), key)
	if err != nil {
		s.fail(w, r, s.decisionError(err, p))
		return
	}
	if !ok {
		s.fail(w, r, bad(http.StatusNotFound, "key %q of policy %q has no override", key, p.cfg.Name))
		return
	}
	writeJSON(w, http.StatusOK, toOverrideBody(p.cfg.Name, key, o))
}

func (s *Server) handleOverrideDelete(w http.ResponseWriter, r *http.Request) {
	p, key, err := s.overrideRoute(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := p.limiter.DeleteOverride(r.Context(), key); err != nil {
		s.fail(w, r, s.decisionError(err, p))
		return
	}
	s.log.Info("key override deleted", "policy", p.cfg.Name, "key", key, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, map[string]any{"policy": p.cfg.Name, "key": key, "deleted": true})
}

func (s *Server) handleOverrideList(w http.ResponseWriter, r *http.Request) {
	p, err := s.overridePolicy(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	list, err := p.limiter.Overrides(r.Context())
	out := struct {
		Overrides []overrideBody `json:"overrides"`
		Malformed string         `json:"malformed,omitempty"`
	}{Overrides: []overrideBody{}}
	if err != nil {
		if errors.Is(err, sluice.ErrStoreUnavailable) {
			s.fail(w, r, s.decisionError(err, p))
			return
		}
		out.Malformed = err.Error() // listed after the well-formed ones
	}
	for _, ko := range list {
		out.Overrides = append(out.Overrides, toOverrideBody(p.cfg.Name, ko.Key, ko.Override))
	}
	writeJSON(w, http.StatusOK, out)
}

// rateString writes a rate as ParseRate reads it (the Per of a parsed rate
// is one of its units).
func rateString(rate float64, per time.Duration) string {
	unit := map[time.Duration]string{time.Second: "s", time.Minute: "m", time.Hour: "h", 24 * time.Hour: "d"}[per]
	if unit == "" {
		return strconv.FormatFloat(rate*float64(time.Second)/float64(per), 'g', -1, 64) + "/s"
	}
	return strconv.FormatFloat(rate, 'g', -1, 64) + "/" + unit
}

// OverrideJSON is an override as GET /v1/overrides answers it (a window
// and a rate as text, times in RFC 3339): sluice override --json prints
// the same form.
type OverrideJSON = overrideBody

// ToOverrideJSON returns o, the override of key under policy, as
// GET /v1/overrides answers it.
func ToOverrideJSON(policy, key string, o sluice.Override) OverrideJSON {
	return toOverrideBody(policy, key, o)
}
