package server

import (
	"strings"
	"testing"
	"time"
)

const quotaYAML = `
admin:
  token_env: SLUICE_TEST_TOKEN
policies:
  - name: messages
    algorithm: fixed_window
    limit: 3
    period: day
    zone: America/Los_Angeles
    overrides: true
    plans:
      pro: {limit: 5}
  - {name: plain, algorithm: fixed_window, limit: 3, window: 1h}
`

// TestQuotaService: a daily quota in a named zone reports the real end of
// the day; a plan named in POST /v1/check applies to the key's count; an
// override set through the admin API takes precedence, is read, listed and
// deleted; bad input is a 4xx naming the field.
func TestQuotaService(t *testing.T) {
	_, ts := newTestServer(t, quotaYAML)
	auth := []string{"Authorization", "Bearer " + testToken}
	check := func(body string) response {
		t.Helper()
		r := do(t, "POST", ts.URL+"/v1/check", body)
		if r.code != 200 {
			t.Fatalf("%s: %d %s", body, r.code, r.raw)
		}
		return r
	}
	before := time.Now()
	r := check(`{"policy":"messages","key":"acme","cost":3}`)
	la, _ := time.LoadLocation("America/Los_Angeles")
	y, m, d := before.In(la).Date()
	end := time.Date(y, m, d+1, 0, 0, 0, 0, la)
	if got := time.Duration(r.body["reset_after_ms"].(float64)) * time.Millisecond; got > end.Sub(before)+time.Second || got < end.Sub(time.Now())-time.Second {
		t.Errorf("reset_after_ms %v, want the time to midnight in Los Angeles, %v", got, end.Sub(before))
	}
	if r.body["source"] != "policy" || r.body["remaining"] != 0.0 {
		t.Errorf("policy: %s", r.raw)
	}
	hdr := func(r response, name string) string { return r.body["headers"].(map[string]any)[name].(string) }
	if reset, _ := time.ParseDuration(hdr(r, "X-RateLimit-Reset") + "s"); reset > end.Sub(before)+2*time.Second || reset < end.Sub(time.Now())-time.Second {
		t.Errorf("X-RateLimit-Reset %v, want the time to midnight in Los Angeles", reset)
	}
	// The plan's limit applies to the 3 already taken.
	r = check(`{"policy":"messages","key":"acme","plan":"pro"}`)
	if r.body["allowed"] != true || r.body["limit"] != 5.0 || r.body["remaining"] != 1.0 || r.body["source"] != "plan" {
		t.Errorf("plan: %s", r.raw)
	}
	if hdr(r, "X-RateLimit-Limit") != "5" {
		t.Errorf("plan's headers: %s", r.raw)
	}
	r = check(`{"checks":[{"policy":"messages","key":"acme","plan":"pro"}]}`)
	if res := r.body["results"].([]any)[0].(map[string]any); res["remaining"] != 0.0 || res["source"] != "plan" {
		t.Errorf("plan in checks: %s", r.raw)
	}
	// An override for acme, until tomorrow.
	url := ts.URL + "/v1/overrides/messages/acme"
	exp := time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)
	body := `{"limit":10,"expires":"` + exp + `","reason":"migration","actor":"ops@example.com"}`
	if r := do(t, "PUT", url, body); r.code != 401 {
		t.Errorf("PUT without the token: %d", r.code)
	}
	r = do(t, "PUT", url, body, auth...)
	if r.code != 200 || r.body["limit"] != 10.0 || r.body["reason"] != "migration" || r.body["actor"] != "ops@example.com" || r.body["expires"] != exp {
		t.Fatalf("PUT: %d %s", r.code, r.raw)
	}
	r = check(`{"policy":"messages","key":"acme","plan":"pro"}`)
	if r.body["allowed"] != true || r.body["limit"] != 10.0 || r.body["remaining"] != 4.0 || r.body["source"] != "override" {
		t.Errorf("override over the plan: %s", r.raw)
	}
	if hdr(r, "X-RateLimit-Limit") != "10" || hdr(r, "X-RateLimit-Remaining") != "4" {
		t.Errorf("override's headers: %s", r.raw)
	}
	if r := do(t, "GET", url, "", auth...); r.code != 200 || r.body["limit"] != 10.0 || r.body["set"] == nil {
		t.Errorf("GET: %d %s", r.code, r.raw)
	}
	r = do(t, "GET", ts.URL+"/v1/overrides/messages", "", auth...)
	if list := r.body["overrides"].([]any); r.code != 200 || len(list) != 1 || list[0].(map[string]any)["key"] != "acme" {
		t.Errorf("list: %d %s", r.code, r.raw)
	}
	if r := do(t, "DELETE", url, "", auth...); r.code != 200 {
		t.Errorf("DELETE: %d %s", r.code, r.raw)
	}
	if r := do(t, "GET", url, "", auth...); r.code != 404 {
		t.Errorf("GET after DELETE: %d %s", r.code, r.raw)
	}
	r = check(`{"policy":"messages","key":"acme","plan":"pro"}`)
	if r.body["allowed"] != false || r.body["source"] != "plan" {
		t.Errorf("after DELETE: %s", r.raw)
	}
	// Bad input.
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		method, url, body string
		code              int
		want              string
	}{
		{"POST", "/v1/check", `{"policy":"messages","key":"k","plan":"gold"}`, 400, `plan "gold" is not a plan of policy "messages"`},
		{"POST", "/v1/check", `{"checks":[{"policy":"messages","key":"k","plan":"gold"}]}`, 400, `checks[0].plan "gold"`},
		{"POST", "/v1/check", `{"policy":"plain","key":"k","plan":"pro"}`, 400, `plan "pro" is not a plan of policy "plain"`},
		{"PUT", "/v1/overrides/messages/k", `{"expires":"` + exp + `"}`, 400, "limit is missing"},
		{"PUT", "/v1/overrides/messages/k", `{"limit":5}`, 400, "expires is missing"},
		{"PUT", "/v1/overrides/messages/k", `{"limit":5,"expires":"` + past + `"}`, 400, "is not after now"},
		{"PUT", "/v1/overrides/messages/k", `{"limit":5,"expires":"friday"}`, 400, "not an RFC 3339 time"},
		{"PUT", "/v1/overrides/messages/k", `{"limit":5,"expires":"` + exp + `","window":"1h"}`, 400, "window is not for"},
		{"PUT", "/v1/overrides/messages/k", `{"limit":5,"expires":"` + exp + `","limt":5}`, 400, `unknown field "limt"`},
		{"PUT", "/v1/overrides/plain/k", `{"limit":5,"expires":"` + exp + `"}`, 409, "does not read key overrides"},
		{"GET", "/v1/overrides/nope", ``, 404, `policy "nope" is not configured`},
	} {
		hdr := auth
		r := do(t, tc.method, ts.URL+tc.url, tc.body, hdr...)
		if detail, _ := r.body["detail"].(string); r.code != tc.code || !strings.Contains(detail, tc.want) {
			t.Errorf("%s %s %s: %d %s, want %d with %q", tc.method, tc.url, tc.body, r.code, r.raw, tc.code, tc.want)
		}
	}
}

// FuzzOverrideBody: no body makes parseOverride panic, and what it
// accepts is a valid override request.
func FuzzOverrideBody(f *testing.F) {
	f.Add([]byte(`{"limit":10,"expires":"2030-01-01T00:00:00Z","rate":"5/s"}`))
	f.Add([]byte(`{"limit":-1}`))
	f.Add([]byte(`{"limit":1,"expires":"2030-01-01T00:00:00Z","window":"7d"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		o, err := parseOverride(data)
		if err == nil && (o.Limit <= 0 || o.Expires.IsZero()) {
			t.Fatalf("accepted %q as %+v", data, o)
		}
	})
}
