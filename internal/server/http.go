package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/config"
)

// Handler returns the HTTP API:
//
//	POST   /v1/check                 one check, or {"checks":[...]} decided together
//	GET    /v1/policies              the loaded policies
//	GET    /v1/keys/{policy}/{key}   admin: peek without consuming
//	DELETE /v1/keys/{policy}/{key}   admin: reset ("unlock this user")
//	GET    /metrics /healthz /readyz
//
// Errors are application/problem+json; bad input is a 4xx, never a 500.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	route := func(pattern, name string, h http.HandlerFunc) {
		mux.Handle(pattern, s.instrument(name, h))
	}
	route("POST /v1/check", "check", s.handleCheck)
	route("GET /v1/policies", "policies", s.handlePolicies)
	route("GET /v1/keys/{policy}/{key...}", "keys", s.admin(s.handlePeek))
	route("DELETE /v1/keys/{policy}/{key...}", "keys", s.admin(s.handleReset))
	route("GET /healthz", "healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	route("GET /readyz", "readyz", s.handleReady)
	metricsHandler := promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{})
	route("GET /metrics", "metrics", metricsHandler.ServeHTTP)

	// The same paths with any other method: 405 as problem+json, where the
	// mux alone would answer in plain text.
	for path, allow := range map[string]string{
		"/v1/check": "POST", "/v1/policies": "GET", "/v1/keys/{policy}/{key...}": "GET, DELETE",
		"/healthz": "GET", "/readyz": "GET", "/metrics": "GET",
	} {
		route(path, "method_not_allowed", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			problem(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s is not supported; use %s", r.Method, r.URL.Path, allow))
		})
	}
	route("/", "not_found", func(w http.ResponseWriter, r *http.Request) {
		problem(w, http.StatusNotFound, fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
	})
	return mux
}

// statusWriter records the status code for metrics.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (s *Server) instrument(name string, h http.HandlerFunc) http.Handler {
	dur := s.metrics.httpDuration.WithLabelValues(name)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("panic in handler", "route", name, "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v))
				if sw.code == 0 {
					problem(sw, http.StatusInternalServerError, "internal error")
				}
			}
			if sw.code == 0 {
				sw.code = http.StatusOK
			}
			s.metrics.httpRequests.WithLabelValues(name, strconv.Itoa(sw.code)).Inc()
			dur.Observe(time.Since(start).Seconds())
		}()
		h(sw, r)
	})
}

// problem writes an RFC 9457 problem+json response.
func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail,omitempty"`
	}{"about:blank", http.StatusText(status), status, detail})
	w.Write(append(b, '\n'))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		problem(w, http.StatusInternalServerError, "encoding the response failed")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// checkItem is one check of POST /v1/check.
type checkItem struct {
	Policy string `json:"policy"`
	Key    string `json:"key"`
	// Cost is the number of units to take (default 1; 0 peeks).
	Cost *int64 `json:"cost"`
}

type checkRequest struct {
	checkItem
	Checks []checkItem `json:"checks"`
}

// Result is the JSON form of a decision.
type Result struct {
	Policy       string            `json:"policy,omitempty"`
	Key          string            `json:"key,omitempty"`
	Allowed      bool              `json:"allowed"`
	Limit        int64             `json:"limit"`
	Remaining    int64             `json:"remaining"`
	RetryAfterMS int64             `json:"retry_after_ms"`
	ResetAfterMS int64             `json:"reset_after_ms"`
	Degraded     bool              `json:"degraded"`
	Shadow       bool              `json:"shadow"`
	Headers      map[string]string `json:"headers,omitempty"`
}

// MultiResult is the answer to {"checks":[...]}.
type MultiResult struct {
	Allowed      bool     `json:"allowed"`
	RetryAfterMS int64    `json:"retry_after_ms"`
	Results      []Result `json:"results"`
}

// ceilMS rounds up to whole milliseconds: a client that waits RetryAfterMS
// is then never early.
func ceilMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

func toResult(p *policy, key string, r sluice.Result) Result {
	return Result{
		Policy: p.cfg.Name, Key: key, Allowed: r.Allowed, Limit: r.Limit, Remaining: r.Remaining,
		RetryAfterMS: ceilMS(r.RetryAfter), ResetAfterMS: ceilMS(r.ResetAfter),
		Degraded: r.Degraded, Shadow: r.Shadowed, Headers: headers(p.cfg, r),
	}
}

// headers returns the rate-limit response headers the policy asks for, for
// the caller to pass on to its client.
func headers(p *config.Policy, r sluice.Result) map[string]string {
	if p.Headers == config.HeadersNone {
		return nil
	}
	h := make(map[string]string, 6)
	reset := strconv.FormatInt(ceilSeconds(r.ResetAfter), 10)
	if p.Headers&config.HeadersXRateLimit != 0 {
		h["X-RateLimit-Limit"] = strconv.FormatInt(r.Limit, 10)
		h["X-RateLimit-Remaining"] = strconv.FormatInt(r.Remaining, 10)
		h["X-RateLimit-Reset"] = reset
	}
	if p.Headers&config.HeadersIETF != 0 {
		w := max(ceilSeconds(p.Window()), 1)
		h["RateLimit-Policy"] = fmt.Sprintf("%q;q=%d;w=%d", p.Name, r.Limit, w)
		h["RateLimit"] = fmt.Sprintf("%q;r=%d;t=%s", p.Name, r.Remaining, reset)
	}
	if p.Headers&config.HeadersRetryAfter != 0 && !r.Allowed {
		h["Retry-After"] = strconv.FormatInt(max(ceilSeconds(r.RetryAfter), 1), 10)
	}
	return h
}

// badRequest is an error the client caused.
type badRequest struct {
	status int
	msg    string
}

func (e *badRequest) Error() string { return e.msg }

func bad(status int, format string, args ...any) error {
	return &badRequest{status: status, msg: fmt.Sprintf(format, args...)}
}

// decodeCheck reads and validates a POST /v1/check body.
func (s *Server) decodeCheck(w http.ResponseWriter, r *http.Request) (checkRequest, error) {
	var req checkRequest
	body := http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
	data, err := io.ReadAll(body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return req, bad(http.StatusRequestEntityTooLarge, "the body is larger than %d bytes", s.opts.MaxBodyBytes)
		}
		return req, bad(http.StatusBadRequest, "reading the body: %v", err)
	}
	return req, parseCheck(data, &req)
}

// parseCheck decodes one JSON object strictly: unknown fields, trailing
// data and mixed single/multi forms are refused.
func parseCheck(data []byte, req *checkRequest) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return bad(http.StatusBadRequest, `the body is empty; send {"policy":"...","key":"...","cost":1}`)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		return bad(http.StatusBadRequest, "malformed JSON body: %s", jsonError(err))
	}
	if dec.More() {
		return bad(http.StatusBadRequest, "malformed JSON body: data after the object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return bad(http.StatusBadRequest, "malformed JSON body: data after the object")
	}
	if req.Checks != nil {
		if req.Policy != "" || req.Key != "" || req.Cost != nil {
			return bad(http.StatusBadRequest, `send either one check ({"policy","key","cost"}) or {"checks":[...]}, not both`)
		}
		if len(req.Checks) == 0 {
			return bad(http.StatusBadRequest, "checks is empty")
		}
		if len(req.Checks) > MaxChecks {
			return bad(http.StatusBadRequest, "at most %d checks per request, got %d", MaxChecks, len(req.Checks))
		}
		for i := range req.Checks {
			if err := validItem(&req.Checks[i], fmt.Sprintf("checks[%d].", i)); err != nil {
				return err
			}
		}
		return nil
	}
	return validItem(&req.checkItem, "")
}

func jsonError(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("%v at byte %d", se, se.Offset)
	case errors.As(err, &te):
		if te.Field != "" {
			return fmt.Sprintf("%s must be %s, got %s", strings.TrimPrefix(te.Field, "checkItem."), jsonType(te.Type.Kind().String()), te.Value)
		}
		return fmt.Sprintf("want a JSON object, got %s", te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends too early"
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

func jsonType(kind string) string {
	switch kind {
	case "int64", "int":
		return "a whole number"
	case "string":
		return "a string"
	case "slice":
		return "a list"
	}
	return kind
}

func validItem(c *checkItem, where string) error {
	if c.Policy == "" {
		return bad(http.StatusBadRequest, "%spolicy is missing", where)
	}
	if c.Key == "" {
		return bad(http.StatusBadRequest, "%skey is missing or empty", where)
	}
	if len(c.Key) > MaxKeyLen {
		return bad(http.StatusBadRequest, "%skey is %d bytes; at most %d are accepted", where, len(c.Key), MaxKeyLen)
	}
	if c.Cost == nil {
		one := int64(1)
		c.Cost = &one
	} else if *c.Cost < 0 {
		return bad(http.StatusBadRequest, "%scost must not be negative, got %d", where, *c.Cost)
	}
	return nil
}

func (s *Server) handleCheck(w http.ResponseWriter, r *http.Request) {
	req, err := s.decodeCheck(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	st := s.state.Load()
	if req.Checks == nil {
		p, err := st.policy(req.Policy, "")
		if err != nil {
			s.fail(w, r, err)
			return
		}
		res, err := p.limiter.AllowN(r.Context(), req.Key, *req.Cost)
		if err != nil {
			s.fail(w, r, s.decisionError(err, p))
			return
		}
		out := toResult(p, "", res)
		for k, v := range out.Headers {
			w.Header()[k] = []string{v} // as spelled in the drafts, not canonicalized
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	checks := make([]sluice.Check, len(req.Checks))
	pols := make([]*policy, len(req.Checks))
	for i, c := range req.Checks {
		p, err := st.policy(c.Policy, fmt.Sprintf("checks[%d].", i))
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if *c.Cost > p.cfg.Limit {
			s.fail(w, r, bad(http.StatusBadRequest, "checks[%d].cost %d exceeds the limit %d of policy %q and could never be allowed", i, *c.Cost, p.cfg.Limit, p.cfg.Name))
			return
		}
		pols[i] = p
		checks[i] = sluice.Check{Limiter: p.limiter, Key: c.Key, Cost: *c.Cost}
	}
	d, err := sluice.AllowAll(r.Context(), checks)
	if err != nil {
		s.fail(w, r, s.decisionError(err, nil))
		return
	}
	out := MultiResult{Allowed: d.Allowed, RetryAfterMS: ceilMS(d.RetryAfter()), Results: make([]Result, len(d.Results))}
	for i, res := range d.Results {
		out.Results[i] = toResult(pols[i], req.Checks[i].Key, res)
	}
	writeJSON(w, http.StatusOK, out)
}

func (st *state) policy(name, where string) (*policy, error) {
	p := st.policies[name]
	if p == nil {
		if len(name) > 64 {
			name = name[:64] + "..."
		}
		return nil, bad(http.StatusNotFound, "%spolicy %q is not configured (GET /v1/policies lists them)", where, name)
	}
	return p, nil
}

// decisionError maps a limiter error: invalid input is the client's fault,
// the rest (its context ended, the store failed where the limiter could not
// fall back) is not.
func (s *Server) decisionError(err error, p *policy) error {
	switch {
	case errors.Is(err, sluice.ErrInvalidCost):
		if p != nil {
			return bad(http.StatusBadRequest, "cost exceeds the limit %d of policy %q and could never be allowed", p.cfg.Limit, p.cfg.Name)
		}
		return bad(http.StatusBadRequest, "%s", strings.TrimPrefix(err.Error(), "sluice: "))
	case errors.Is(err, sluice.ErrInvalidKey):
		return bad(http.StatusBadRequest, "key is empty")
	}
	return err
}

// fail writes err: a client error as its 4xx, anything else as 503 (the
// decision could not be made; never a 500 for what the client sent).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var br *badRequest
	if errors.As(err, &br) {
		problem(w, br.status, br.msg)
		return
	}
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		// The client went away; nobody reads this.
		problem(w, http.StatusServiceUnavailable, "the request was canceled")
		return
	}
	s.log.Warn("decision failed", "method", r.Method, "path", r.URL.Path, "err", err)
	problem(w, http.StatusServiceUnavailable, "the decision could not be made: "+err.Error())
}

// policyInfo is one entry of GET /v1/policies.
type policyInfo struct {
	Name        string   `json:"name"`
	Algorithm   string   `json:"algorithm"`
	Limit       int64    `json:"limit"`
	Window      string   `json:"window,omitempty"`
	Rate        string   `json:"rate,omitempty"`
	Rule        string   `json:"rule"`
	OnFailure   string   `json:"on_failure"`
	Shadow      bool     `json:"shadow"`
	Timeout     string   `json:"timeout"`
	Headers     []string `json:"headers"`
	Description string   `json:"description,omitempty"`
	Envoy       bool     `json:"envoy,omitempty"`
	Domain      string   `json:"domain,omitempty"`
}

func (s *Server) handlePolicies(w http.ResponseWriter, r *http.Request) {
	st := s.state.Load()
	out := struct {
		Source   string       `json:"source"`
		LoadedAt time.Time    `json:"loaded_at"`
		Store    string       `json:"store"`
		Policies []policyInfo `json:"policies"`
	}{Source: st.cfg.Source, LoadedAt: st.loadedAt.UTC().Truncate(time.Second), Store: s.opts.StoreName, Policies: []policyInfo{}}
	for _, p := range st.order {
		c := p.cfg
		info := policyInfo{
			Name: c.Name, Algorithm: c.Algorithm.String(), Limit: c.Limit, Rule: p.limiter.Rule().String(),
			OnFailure: map[sluice.FailMode]string{sluice.FailOpen: "allow", sluice.FailClosed: "deny"}[c.FailMode],
			Shadow:    c.Shadow, Headers: c.Headers.Names(), Description: c.Description, Envoy: c.Envoy, Domain: c.Domain,
			Timeout: sluice.DefaultTimeout.String(),
		}
		if c.Timeout > 0 {
			info.Timeout = c.Timeout.String()
		}
		switch pol := c.Policy.(type) {
		case sluice.TokenBucket:
			info.Rate = fmt.Sprintf("%g/%s", pol.Rate, unitName(pol.Per))
		case sluice.GCRA:
			info.Rate = fmt.Sprintf("%g/%s", pol.Rate, unitName(pol.Per))
		default:
			info.Window = c.Window().String()
		}
		out.Policies = append(out.Policies, info)
	}
	writeJSON(w, http.StatusOK, out)
}

func unitName(d time.Duration) string {
	switch d {
	case time.Second:
		return "s"
	case time.Minute:
		return "m"
	case time.Hour:
		return "h"
	case 24 * time.Hour:
		return "d"
	}
	return d.String()
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if err := s.Ready(r.Context()); err != nil {
		problem(w, http.StatusServiceUnavailable, "not ready: "+err.Error())
		return
	}
	st := s.state.Load()
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "store": s.opts.StoreName, "config": st.cfg.Source, "policies": len(st.order)})
}

// admin guards h with the admin bearer token. Without a configured token
// the routes are off (404).
func (s *Server) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		st := s.state.Load()
		if st.adminHash == nil {
			problem(w, http.StatusNotFound, "admin routes are off: configure admin.token_env or admin.token_file")
			return
		}
		auth := r.Header.Get("Authorization")
		scheme, token, ok := strings.Cut(auth, " ")
		if auth == "" || !ok || !strings.EqualFold(scheme, "Bearer") {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
			problem(w, http.StatusUnauthorized, "an admin bearer token is required (Authorization: Bearer <token>)")
			return
		}
		if !st.authorized(strings.TrimSpace(token)) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice", error="invalid_token"`)
			s.log.Warn("admin request with a wrong token", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
			problem(w, http.StatusUnauthorized, "the admin token is wrong")
			return
		}
		h(w, r)
	}
}

func (s *Server) keyRoute(r *http.Request) (*policy, string, error) {
	st := s.state.Load()
	p, err := st.policy(r.PathValue("policy"), "")
	if err != nil {
		return nil, "", err
	}
	key := r.PathValue("key")
	if key == "" || len(key) > MaxKeyLen {
		return nil, "", bad(http.StatusBadRequest, "key must be 1 to %d bytes", MaxKeyLen)
	}
	return p, key, nil
}

func (s *Server) handlePeek(w http.ResponseWriter, r *http.Request) {
	p, key, err := s.keyRoute(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := p.limiter.Peek(r.Context(), key)
	if err != nil {
		s.fail(w, r, s.decisionError(err, p))
		return
	}
	writeJSON(w, http.StatusOK, toResult(p, key, res))
}

func (s *Server) handleReset(w http.ResponseWriter, r *http.Request) {
	p, key, err := s.keyRoute(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := p.limiter.Reset(r.Context(), key); err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info("key reset", "policy", p.cfg.Name, "key", key, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, map[string]any{"policy": p.cfg.Name, "key": key, "reset": true})
}
