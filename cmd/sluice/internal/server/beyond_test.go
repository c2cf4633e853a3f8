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
