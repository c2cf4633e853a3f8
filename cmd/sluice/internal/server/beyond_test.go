package server

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

const warnYAML = `
policies:
  - {name: api, algorithm: fixed_window, limit: 4, window: 1h, warn_at: 75, warning_header: true}
  - {name: quiet, algorithm: fixed_window, limit: 4, window: 1h, warn_at: 50}
forward_auth:
  trusted_proxies: [10.0.0.0/8]
  routes:
    - {path_prefix: /api, limits: [{policy: api, key: client_ip}]}
`

// TestWarningServe: a policy's warn_at sets "warning" in /v1/check
// answers from the edge on, warning_header sends X-RateLimit-Warning there
// and in forward-auth answers, and sluice_warnings_total counts them.
func TestWarningServe(t *testing.T) {
	s, ts := newTestServer(t, warnYAML)
	for i, want := range []bool{false, false, true, true, false} { // 3 of 4 used is 75%; the 5th is refused
		r := do(t, "POST", ts.URL+"/v1/check", `{"policy":"api","key":"k"}`)
		got, _ := r.body["warning"].(bool)
		if got != want {
			t.Fatalf("check %d: warning %v, want %v: %s", i+1, got, want, r.raw)
		}
		if h := r.header.Get("X-RateLimit-Warning"); (h == `"api"`) != want {
			t.Fatalf("check %d: X-RateLimit-Warning %q: %s", i+1, h, r.raw)
		}
	}
	// quiet warns in the answer, without the header.
	for range 2 {
		do(t, "POST", ts.URL+"/v1/check", `{"policy":"quiet","key":"k"}`)
	}
	r := do(t, "POST", ts.URL+"/v1/check", `{"policy":"quiet","key":"k"}`)
	if r.body["warning"] != true || r.header.Get("X-RateLimit-Warning") != "" {
		t.Fatalf("quiet: %v %s", r.header, r.raw)
	}
	// Forward auth: the third request of a client warns.
	for i, want := range []string{"", "", `"api"`} {
		w := fwd(s, "GET", "h", "/api/x", "192.0.2.9")
		if w.Code != 200 || hget(w, "X-RateLimit-Warning") != want {
			t.Fatalf("forward auth %d: %d %v", i+1, w.Code, w.Header())
		}
	}
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range []string{`sluice_warnings_total{limiter="api.fixed_window"} 3`, `sluice_warnings_total{limiter="quiet.fixed_window"} 2`} {
		if !strings.Contains(string(body), line) {
			t.Errorf("/metrics lacks %s", line)
		}
	}
}

const denyYAML = `
policies:
  - {name: capacity, algorithm: gcra, burst: 1, rate: 1/h, deny_status: 503, deny_body: {error: busy}}   # refused about an hour, always longer than fair (fixed windows of 1h and 1m end together once an hour)
  - {name: fair, algorithm: fixed_window, limit: 1, window: 1m, deny_status: 420}
  - {name: plain, algorithm: fixed_window, limit: 1, window: 1m}
forward_auth:
  trusted_proxies: [10.0.0.0/8]
  routes:
    - {path_prefix: /both, limits: [{policy: fair, key: client_ip}, {policy: capacity, key: client_ip}]}
    - {path_prefix: /fair, limits: [{policy: fair, key: client_ip}]}
`

// TestDenyServe: the policy's deny_status and deny_body are in /v1/check
// refusals (the one refused longest for several checks), answer Traefik
// and Caddy's forward auth, and nginx's through 403, X-Sluice-Deny-Policy
// and /v1/forward-auth/nginx/refused/{policy}.
func TestDenyServe(t *testing.T) {
	s, ts := newTestServer(t, denyYAML)
	check := func(body string) response { return do(t, "POST", ts.URL+"/v1/check", body) }
	check(`{"policy":"capacity","key":"k"}`)
	r := check(`{"policy":"capacity","key":"k"}`)
	if r.body["deny_status"] != 503.0 || r.raw == "" || !strings.Contains(r.raw, `"deny_body":{"error":"busy"}`) {
		t.Fatalf("capacity refused: %s", r.raw)
	}
	if r := check(`{"policy":"plain","key":"k"}`); r.body["deny_status"] != nil {
		t.Fatalf("allowed: %s", r.raw)
	}
	if r := check(`{"policy":"plain","key":"k"}`); r.body["deny_status"] != 429.0 || r.body["deny_body"] != nil {
		t.Fatalf("plain refused: %s", r.raw)
	}
	check(`{"policy":"fair","key":"m"}`)
	r = check(`{"checks":[{"policy":"fair","key":"m"},{"policy":"capacity","key":"k"}]}`)
	if r.body["deny_status"] != 503.0 || !strings.Contains(r.raw, `"deny_body":{"error":"busy"}`) {
		t.Fatalf("multi: %s", r.raw)
	}

	// Forward auth, Traefik and Caddy: the status and body themselves.
	if w := fwd(s, "GET", "h", "/both", "192.0.2.1"); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	w := fwd(s, "GET", "h", "/both", "192.0.2.1")
	if w.Code != 503 || w.Body.String() != `{"error":"busy"}` || w.Header().Get("Content-Type") != "application/json" || w.Header().Get("Retry-After") == "" {
		t.Fatalf("both: %d %q %v", w.Code, w.Body, w.Header())
	}
	w = fwd(s, "GET", "h", "/fair", "192.0.2.1")
	if w.Code != 420 || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("fair: %d %v", w.Code, w.Header())
	}
	// nginx: 403 naming the policy, whose response nginx then fetches.
	w = ask(s, "/v1/forward-auth/nginx", "10.0.0.1", "X-Original-Method", "GET", "X-Original-URI", "/both",
		"X-Original-Host", "h", "X-Forwarded-For", "192.0.2.1")
	if w.Code != 403 || w.Header().Get("X-Sluice-Deny-Policy") != "capacity" {
		t.Fatalf("nginx: %d %v", w.Code, w.Header())
	}
	w = ask(s, "/v1/forward-auth/nginx/refused/capacity", "10.0.0.1")
	if w.Code != 503 || w.Body.String() != `{"error":"busy"}` {
		t.Fatalf("nginx refused/capacity: %d %q", w.Code, w.Body)
	}
	if w = ask(s, "/v1/forward-auth/nginx/refused/plain", "10.0.0.1"); w.Code != 429 || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("nginx refused/plain: %d %v", w.Code, w.Header())
	}
}

// TestPoliciesShowBeyond: GET /v1/policies shows warn_at, deny_status
// (429 by default) and deny_body.
func TestPoliciesShowBeyond(t *testing.T) {
	_, ts := newTestServer(t, denyYAML+"\n")
	r := do(t, "GET", ts.URL+"/v1/policies", "")
	if !strings.Contains(r.raw, `"deny_status":503,"deny_body":{"error":"busy"}`) || !strings.Contains(r.raw, `"name":"plain"`) ||
		strings.Count(r.raw, `"deny_status":429`) != 1 || strings.Count(r.raw, `"deny_status":420`) != 1 {
		t.Fatalf("%s", r.raw)
	}
	_, ts = newTestServer(t, warnYAML)
	if r := do(t, "GET", ts.URL+"/v1/policies", ""); !strings.Contains(r.raw, `"warn_at":75`) || !strings.Contains(r.raw, `"warn_at":50`) {
		t.Fatalf("%s", r.raw)
	}
}

const warnRouteYAML = `
policies:
  - {name: minute, algorithm: fixed_window, limit: 4, window: 1m, warn_at: 50, warning_header: true}
  - {name: hour, algorithm: fixed_window, limit: 10, window: 1h, warn_at: 20, warning_header: true}
  - {name: day, algorithm: fixed_window, limit: 100, window: 24h, warn_at: 1}
  - {name: dark, algorithm: fixed_window, limit: 100, window: 24h, warn_at: 1, warning_header: true, shadow: true}
forward_auth:
  trusted_proxies: [10.0.0.0/8]
  routes:
    - path_prefix: /api
      limits:
        - {policy: dark, key: client_ip}
        - {policy: day, key: client_ip}
        - {policy: hour, key: client_ip}
        - {policy: minute, key: {all: [client_ip, header:X-User]}}
`

// TestWarningHeaderRoute: a forward-auth answer's X-RateLimit-Warning
// names every policy of the route whose decision warned and that sends
// the header, in the route's order and each once, not only the binding
// one; a policy without warning_header and a shadow policy are not named.
func TestWarningHeaderRoute(t *testing.T) {
	s := fwdServer(t, warnRouteYAML, nil)
	// The second request leaves 2 of minute's 4 (50%, for each of its two
	// keys) and 8 of hour's 10 (20%): both warn, minute binds.
	for i, want := range []string{"", `"hour", "minute"`} {
		w := fwd(s, "GET", "h", "/api/x", "192.0.2.9", "X-User", "u")
		if w.Code != 200 || hget(w, "X-RateLimit-Warning") != want {
			t.Fatalf("request %d: %d, X-RateLimit-Warning %q, want %q (%v)", i+1, w.Code, hget(w, "X-RateLimit-Warning"), want, w.Header())
		}
		if i == 1 && policyOf(w) != "minute" {
			t.Fatalf("binding policy %q, want minute", policyOf(w))
		}
	}
}
