package server

import (
	"strings"
	"testing"
	"time"
)

const inForceYAML = `
admin:
  token_env: SLUICE_TEST_TOKEN
policies:
  - name: api
    algorithm: fixed_window
    limit: 100
    window: 1h
    overrides: true
    plans:
      pro: {limit: 500}
`

// TestRuleInForce: under an override with its own window, /v1/check's
// answer, its headers and the admin peek all show the override's limit
// and window (not the policy's), with its source; a plan's answer shows
// the plan's rule; GET /v1/policies lists the plans and whether overrides
// are read.
func TestRuleInForce(t *testing.T) {
	_, ts := newTestServer(t, inForceYAML)
	auth := []string{"Authorization", "Bearer " + testToken}
	check := func(body string) response {
		t.Helper()
		r := do(t, "POST", ts.URL+"/v1/check", body)
		if r.code != 200 {
			t.Fatalf("%s: %d %s", body, r.code, r.raw)
		}
		return r
	}
	r := check(`{"policy":"api","key":"k","plan":"pro"}`)
	if r.body["source"] != "plan" || r.body["limit"] != 500.0 || r.body["window_ms"] != 3_600_000.0 || r.body["plan"] != "pro" ||
		!strings.Contains(r.body["rule"].(string), "500") {
		t.Errorf("plan: %s", r.raw)
	}
	if got := r.header.Get("RateLimit-Policy"); got != `"api";q=500;w=3600` {
		t.Errorf("plan's RateLimit-Policy %q", got)
	}
	exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if r := do(t, "PUT", ts.URL+"/v1/overrides/api/k", `{"limit":50,"window":"10m","expires":"`+exp+`"}`, auth...); r.code != 200 {
		t.Fatalf("PUT override: %d %s", r.code, r.raw)
	}
	r = check(`{"policy":"api","key":"k","plan":"pro"}`)
	if r.body["source"] != "override" || r.body["limit"] != 50.0 || r.body["window_ms"] != 600_000.0 ||
		!strings.Contains(r.body["rule"].(string), "10m") {
		t.Errorf("override: %s", r.raw)
	}
	if got := r.header.Get("RateLimit-Policy"); got != `"api";q=50;w=600` {
		t.Errorf("override's RateLimit-Policy %q, want the override's quota and window", got)
	}
	if got := r.header.Get("X-RateLimit-Limit"); got != "50" {
		t.Errorf("override's X-RateLimit-Limit %q", got)
	}
	// The admin peek shows the same rule, taking nothing. (What remains
	// depends on whether the 10-minute window shares the hour's start.)
	left := r.body["remaining"]
	for range 2 {
		p := do(t, "GET", ts.URL+"/v1/keys/api/k?plan=pro", "", auth...)
		if p.code != 200 || p.body["source"] != "override" || p.body["limit"] != 50.0 || p.body["window_ms"] != 600_000.0 || p.body["remaining"] != left {
			t.Errorf("peek: %d %s", p.code, p.raw)
		}
	}
	if p := do(t, "GET", ts.URL+"/v1/keys/api/k?plan=gold", "", auth...); p.code != 400 {
		t.Errorf("peek under an unknown plan: %d %s", p.code, p.raw)
	}
	// GET /v1/policies: plans and overrides.
	r = do(t, "GET", ts.URL+"/v1/policies", "")
	api := r.body["policies"].([]any)[0].(map[string]any)
	plans, _ := api["plans"].([]any)
	if api["overrides"] != true || len(plans) != 1 || plans[0].(map[string]any)["name"] != "pro" || plans[0].(map[string]any)["limit"] != 500.0 ||
		plans[0].(map[string]any)["window"] != "1h0m0s" || api["show_keys"] != "hashed" {
		t.Errorf("policies: %s", r.raw)
	}
}
