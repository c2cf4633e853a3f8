package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/memstore"
)

const testToken = "test-admin-token-0123456789"

const testYAML = `
admin:
  token_env: SLUICE_TEST_TOKEN
policies:
  - {name: api, algorithm: token_bucket, burst: 3, rate: 1/m, on_failure: allow}
  - {name: login, algorithm: sliding_log, limit: 2, window: 15m, on_failure: deny, count_rejected: true, headers: [retry-after]}
  - {name: global, algorithm: fixed_window, limit: 4, window: 1h, headers: none}
  - {name: dark, algorithm: gcra, burst: 1, rate: 1/h, shadow: true}
`

func testEnv(k string) (string, bool) {
	if k == "SLUICE_TEST_TOKEN" {
		return testToken, true
	}
	return "", false
}

func quietLogger() *slog.Logger { return slog.New(slog.NewJSONHandler(io.Discard, nil)) }

func newTestServer(t *testing.T, yaml string) (*Server, *httptest.Server) {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, Options{Store: memstore.New(), StoreName: "memory", Logger: quietLogger(), Env: testEnv})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return s, ts
}

type response struct {
	code   int
	header http.Header
	body   map[string]any
	raw    string
}

func do(t *testing.T, method, url, body string, hdr ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := response{code: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if strings.Contains(resp.Header.Get("Content-Type"), "json") {
		if err := json.Unmarshal(raw, &r.body); err != nil {
			t.Fatalf("%s %s: body is not JSON: %v\n%s", method, url, err, raw)
		}
	}
	return r
}

func TestCheck(t *testing.T) {
	_, ts := newTestServer(t, testYAML)
	url := ts.URL + "/v1/check"
	// Token bucket of 3, refilled at 1/m: three allowed, the fourth refused.
	for i, want := range []struct {
		allowed   bool
		remaining float64
	}{{true, 2}, {true, 1}, {true, 0}, {false, 0}} {
		r := do(t, "POST", url, `{"policy":"api","key":"key_abc"}`)
		if r.code != 200 {
			t.Fatalf("check %d: %d %s", i, r.code, r.raw)
		}
		if r.body["allowed"] != want.allowed || r.body["remaining"] != want.remaining || r.body["limit"] != 3.0 {
			t.Fatalf("check %d: %s", i, r.raw)
		}
		if !want.allowed {
			if ra := r.body["retry_after_ms"].(float64); ra < 59000 || ra > 60000 {
				t.Errorf("retry_after_ms = %v, want about 60000 (1 token per minute)", ra)
			}
			if r.header.Get("Retry-After") == "" || r.header.Get("X-RateLimit-Remaining") != "0" {
				t.Errorf("headers: %v", r.header)
			}
		}
	}
	// Another key has its own budget; cost takes several units.
	r := do(t, "POST", url, `{"policy":"api","key":"other","cost":3}`)
	if r.body["allowed"] != true || r.body["remaining"] != 0.0 {
		t.Fatalf("cost 3: %s", r.raw)
	}
	// Cost 0 peeks.
	r = do(t, "POST", url, `{"policy":"api","key":"fresh","cost":0}`)
	if r.body["allowed"] != true || r.body["remaining"] != 3.0 {
		t.Fatalf("peek: %s", r.raw)
	}
	// Shadow mode: allowed, shadow reported.
	do(t, "POST", url, `{"policy":"dark","key":"k"}`)
	r = do(t, "POST", url, `{"policy":"dark","key":"k"}`)
	if r.body["allowed"] != true || r.body["shadow"] != true {
		t.Fatalf("shadow: %s", r.raw)
	}
	// headers: none sends none.
	r = do(t, "POST", url, `{"policy":"global","key":"k"}`)
	if _, ok := r.body["headers"]; ok || r.header.Get("X-RateLimit-Limit") != "" {
		t.Fatalf("headers none: %s %v", r.raw, r.header)
	}
}

func TestCheckErrors(t *testing.T) {
	_, ts := newTestServer(t, testYAML)
	url := ts.URL + "/v1/check"
	cases := []struct {
		body string
		code int
		want string
	}{
		{`{"policy":"nope","key":"k"}`, 404, `policy \"nope\" is not configured`},
		{`{"policy":"api","key":""}`, 400, "key is missing or empty"},
		{`{"policy":"api"}`, 400, "key is missing or empty"},
		{`{"key":"k"}`, 400, "policy is missing"},
		{`{"policy":"api","key":"` + strings.Repeat("x", MaxKeyLen+1) + `"}`, 400, "at most 1024 are accepted"},
		{`{"policy":"api","key":"k","cost":-1}`, 400, "cost must not be negative"},
		{`{"policy":"api","key":"k","cost":4}`, 400, "exceeds the limit 3"},
		{`{"policy":"api","key":"k","cost":1.5}`, 400, "cost must be a whole number"},
		{`{"policy":"api","key":"k","cost":99999999999999999999}`, 400, "cost must be a whole number"},
		{`{"policy":"api","key":"k","extra":1}`, 400, `unknown field \"extra\"`},
		{`{"policy":"api","key":"k"} {}`, 400, "data after the object"},
		{`{"policy":"api","key":"k"`, 400, "malformed JSON"},
		{``, 400, "the body is empty"},
		{`null`, 400, "policy is missing"},
		{`[]`, 400, "want a JSON object"},
		{`{"checks":[]}`, 400, "checks is empty"},
		{`{"checks":[{"policy":"api","key":"k"}],"policy":"api"}`, 400, "not both"},
		{`{"checks":[{"policy":"api","key":"k"}],"plan":"pro"}`, 400, "not both"},
		{`{"checks":[{"policy":"api","key":"k"},{"policy":"x","key":"k"}]}`, 404, `checks[1].policy \"x\"`},
		{`{"checks":[{"policy":"api","key":"k","cost":-2}]}`, 400, "checks[0].cost must not be negative"},
		{`{"checks":[{"policy":"api","key":"k","cost":9}]}`, 400, "checks[0].cost 9 exceeds the limit 3"},
		{`{"checks":[` + strings.Repeat(`{"policy":"api","key":"k"},`, MaxChecks) + `{"policy":"api","key":"k"}]}`, 400, "at most 32 checks"},
	}
	for _, tc := range cases {
		r := do(t, "POST", url, tc.body)
		if r.code != tc.code || !strings.Contains(r.raw, tc.want) {
			t.Errorf("%.60s: got %d %s, want %d containing %q", tc.body, r.code, r.raw, tc.code, tc.want)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%.60s: content type %q", tc.body, ct)
		}
	}
	// Oversized body.
	r := do(t, "POST", url, `{"policy":"api","key":"`+strings.Repeat("x", DefaultMaxBodyBytes)+`"}`)
	if r.code != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body: %d %s", r.code, r.raw)
	}
	// Wrong method and unknown route: problem+json too.
	if r := do(t, "GET", url, ""); r.code != 405 || r.header.Get("Allow") != "POST" || r.body["status"] != 405.0 {
		t.Errorf("GET /v1/check: %d %s", r.code, r.raw)
	}
	if r := do(t, "GET", ts.URL+"/nowhere", ""); r.code != 404 || r.body["status"] != 404.0 {
		t.Errorf("unknown route: %d %s", r.code, r.raw)
	}
}

// TestMultiCheckRefunds: a request refused by one check takes nothing from
// the others.
func TestMultiCheckRefunds(t *testing.T) {
	_, ts := newTestServer(t, testYAML)
	url := ts.URL + "/v1/check"
	body := `{"checks":[{"policy":"global","key":"all"},{"policy":"login","key":"alice"}]}`
	for i := 0; i < 2; i++ {
		r := do(t, "POST", url, body)
		if r.body["allowed"] != true {
			t.Fatalf("check %d: %s", i, r.raw)
		}
	}
	r := do(t, "POST", url, body)
	if r.body["allowed"] != false {
		t.Fatalf("third: %s", r.raw)
	}
	results := r.body["results"].([]any)
	if results[0].(map[string]any)["allowed"] != true || results[1].(map[string]any)["allowed"] != false {
		t.Fatalf("results: %s", r.raw)
	}
	if r.body["retry_after_ms"].(float64) <= 0 {
		t.Errorf("retry_after_ms: %s", r.raw)
	}
	// global took 2 (the third was refunded): 2 remain.
	r = do(t, "POST", url, `{"policy":"global","key":"all","cost":0}`)
	if r.body["remaining"] != 2.0 {
		t.Fatalf("global after refund: %s", r.raw)
	}
}

func TestPolicies(t *testing.T) {
	_, ts := newTestServer(t, testYAML)
	r := do(t, "GET", ts.URL+"/v1/policies", "")
	if r.code != 200 {
		t.Fatal(r.raw)
	}
	ps := r.body["policies"].([]any)
	if len(ps) != 4 {
		t.Fatalf("%s", r.raw)
	}
	api := ps[0].(map[string]any)
	if api["name"] != "api" || api["algorithm"] != "token_bucket" || api["rate"] != "1/m" || api["on_failure"] != "allow" {
		t.Errorf("api: %v", api)
	}
	login := ps[1].(map[string]any)
	if login["window"] != "15m0s" || login["on_failure"] != "deny" {
		t.Errorf("login: %v", login)
	}
}

func TestAdmin(t *testing.T) {
	_, ts := newTestServer(t, testYAML)
	key := ts.URL + "/v1/keys/login/alice%2Fsmith"
	// Lock alice/smith out.
	for i := 0; i < 3; i++ {
		do(t, "POST", ts.URL+"/v1/check", `{"policy":"login","key":"alice/smith"}`)
	}
	for _, tc := range []struct {
		name, auth string
		code       int
	}{
		{"no token", "", 401},
		{"not bearer", "Basic " + testToken, 401},
		{"wrong token", "Bearer wrong-token-0123456789", 401},
		{"prefix of the token", "Bearer " + testToken[:10], 401},
		{"right token", "Bearer " + testToken, 200},
	} {
		for _, method := range []string{"GET", "DELETE"} {
			if tc.code == 200 && method == "DELETE" {
				continue
			}
			r := do(t, method, key, "", "Authorization", tc.auth)
			if r.code != tc.code {
				t.Errorf("%s %s: %d %s", tc.name, method, r.code, r.raw)
			}
			if tc.code == 401 && r.header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s: no WWW-Authenticate", tc.name)
			}
		}
	}
	r := do(t, "GET", key, "", "Authorization", "Bearer "+testToken)
	if r.body["allowed"] != false || r.body["key"] != "alice/smith" {
		t.Fatalf("peek: %s", r.raw)
	}
	// Peeking consumes nothing, even under count_rejected.
	r2 := do(t, "GET", key, "", "Authorization", "Bearer "+testToken)
	if r2.body["retry_after_ms"] != r.body["retry_after_ms"] && r2.body["remaining"] != 0.0 {
		t.Errorf("second peek: %s", r2.raw)
	}
	r = do(t, "DELETE", key, "", "Authorization", "Bearer "+testToken)
	if r.code != 200 || r.body["reset"] != true {
		t.Fatalf("reset: %d %s", r.code, r.raw)
	}
	r = do(t, "POST", ts.URL+"/v1/check", `{"policy":"login","key":"alice/smith"}`)
	if r.body["allowed"] != true || r.body["remaining"] != 1.0 {
		t.Fatalf("after reset: %s", r.raw)
	}
	if r := do(t, "GET", ts.URL+"/v1/keys/nope/k", "", "Authorization", "Bearer "+testToken); r.code != 404 {
		t.Errorf("unknown policy: %d", r.code)
	}
}

func TestAdminOff(t *testing.T) {
	_, ts := newTestServer(t, "policies:\n  - {name: a, algorithm: gcra, burst: 1, rate: 1/s}\n")
	r := do(t, "DELETE", ts.URL+"/v1/keys/a/k", "", "Authorization", "Bearer "+testToken)
	if r.code != 404 || !strings.Contains(r.raw, "admin routes are off") {
		t.Fatalf("%d %s", r.code, r.raw)
	}
}

func TestAdminTokenMissing(t *testing.T) {
	cfg, err := config.Parse("t.yaml", []byte("admin: {token_env: NOT_SET_ANYWHERE}\npolicies:\n  - {name: a, algorithm: gcra, burst: 1, rate: 1/s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg, Options{Store: memstore.New(), Env: testEnv, Logger: quietLogger()}); err == nil || !strings.Contains(err.Error(), "NOT_SET_ANYWHERE") {
		t.Fatalf("err = %v", err)
	}
}

func TestHealthAndMetrics(t *testing.T) {
	_, ts := newTestServer(t, testYAML)
	if r := do(t, "GET", ts.URL+"/healthz", ""); r.code != 200 {
		t.Errorf("healthz %d", r.code)
	}
	if r := do(t, "GET", ts.URL+"/readyz", ""); r.code != 200 || r.body["store"] != "memory" {
		t.Errorf("readyz %d %s", r.code, r.raw)
	}
	do(t, "POST", ts.URL+"/v1/check", `{"policy":"api","key":"m"}`)
	r := do(t, "GET", ts.URL+"/metrics", "")
	for _, want := range []string{
		`sluice_decisions_total{limiter="api.token_bucket",outcome="allowed"} 1`,
		`sluice_decision_duration_seconds_bucket`,
		`sluice_server_http_requests_total{code="200",route="check"} 1`,
		`sluice_server_config_reloads_total{result="failure"} 0`,
		`go_goroutines`,
		`sluice_build_info{goversion="` + runtime.Version() + `",`,
	} {
		if !strings.Contains(r.raw, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	os.WriteFile(path, []byte(testYAML), 0o644)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, Options{Store: memstore.New(), Logger: quietLogger(), Env: testEnv})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()

	// A good file: the new policy serves.
	os.WriteFile(path, []byte(testYAML+"  - {name: added, algorithm: fixed_window, limit: 1, window: 1s}\n"), 0o644)
	if err := s.Reload(path, "test"); err != nil {
		t.Fatal(err)
	}
	if r := do(t, "POST", ts.URL+"/v1/check", `{"policy":"added","key":"k"}`); r.code != 200 {
		t.Fatalf("added: %d %s", r.code, r.raw)
	}
	// A bad file: rejected, counted, the last good config keeps serving.
	os.WriteFile(path, []byte("policies:\n  - {name: x, algorithm: gcra, burst: 0, rate: 1/s}\n"), 0o644)
	if err := s.Reload(path, "test"); err == nil || !strings.Contains(err.Error(), ":3:") && !strings.Contains(err.Error(), ":2:") {
		t.Fatalf("bad file: %v", err)
	}
	m := do(t, "GET", ts.URL+"/metrics", "").raw
	for _, want := range []string{`sluice_server_config_reloads_total{result="failure"} 1`, "sluice_server_config_last_reload_successful 0"} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if r := do(t, "POST", ts.URL+"/v1/check", `{"policy":"added","key":"k2"}`); r.code != 200 {
		t.Fatalf("after a bad reload: %d %s", r.code, r.raw)
	}

	// Watch: a file replaced by rename is picked up.
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); s.Watch(ctx, path) }()
	defer func() { cancel(); wg.Wait() }()
	time.Sleep(100 * time.Millisecond)
	tmp := filepath.Join(dir, ".sluice.yaml.tmp")
	os.WriteFile(tmp, []byte("policies:\n  - {name: watched, algorithm: fixed_window, limit: 1, window: 1s}\n"), 0o644)
	os.Rename(tmp, path)
	deadline := time.Now().Add(5 * time.Second)
	for s.Config().Policy("watched") == nil {
		if time.Now().After(deadline) {
			t.Fatal("the watcher did not reload the file")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if m := do(t, "GET", ts.URL+"/metrics", "").raw; !strings.Contains(m, "\nsluice_server_config_last_reload_successful 1\n") { // the line, not the help text ("1 when ...")
		t.Error("last reload not reported successful")
	}
}

// FuzzCheck: whatever the body, POST /v1/check answers JSON with a status
// that is not a 5xx (the memory store never fails).
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		`{"policy":"api","key":"key_abc","cost":1}`,
		`{"checks":[{"policy":"api","key":"a"},{"policy":"login","key":"b","cost":2}]}`,
		`{"policy":"api","key":"k","cost":-1}`, `{"policy":"api","key":"\u0000"}`, `[]`, `null`, `{"cost":1e400}`,
	} {
		f.Add([]byte(s))
	}
	cfg, err := config.Parse("fuzz.yaml", []byte(testYAML))
	if err != nil {
		f.Fatal(err)
	}
	s, err := New(cfg, Options{Store: memstore.New(), Logger: quietLogger(), Env: testEnv})
	if err != nil {
		f.Fatal(err)
	}
	h := s.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest("POST", "/v1/check", bytes.NewReader(body))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code >= 500 {
			t.Fatalf("%d for %q: %s", w.Code, body, w.Body)
		}
		var v map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
			t.Fatalf("not JSON for %q: %s", body, w.Body)
		}
		if w.Code == 200 {
			if _, ok := v["allowed"].(bool); !ok {
				t.Fatalf("200 without allowed: %s", w.Body)
			}
		} else if w.Header().Get("Content-Type") != "application/problem+json" {
			t.Fatalf("%d without problem+json", w.Code)
		}
	})
}

// TestAdminWrongTokenLogThrottled: a flood of wrong admin tokens writes one
// WARN line per 10s, not one per request, each saying how many it held back.
func TestAdminWrongTokenLogThrottled(t *testing.T) {
	cfg, err := config.Parse("test.yaml", []byte(testYAML))
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	s, err := New(cfg, Options{Store: memstore.New(), StoreName: "memory", Logger: logger, Env: testEnv})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	for range 6000 {
		req := httptest.NewRequest("GET", "/v1/keys/login/k", nil)
		req.Header.Set("Authorization", "Bearer wrong-token-0123456789")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 401 {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "wrong token"); n != 1 {
		t.Errorf("%d log lines for 6000 wrong tokens in well under 10s, want 1:\n%s", n, logs.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestHeaderTooLarge: header fields past MaxHeaderBytes get 431 as
// problem+json, through an http.Server configured as sluice serve's.
func TestHeaderTooLarge(t *testing.T) {
	s, _ := newTestServer(t, testYAML)
	ts := httptest.NewUnstartedServer(s.Handler())
	ts.Config.MaxHeaderBytes = HeaderReadLimit
	ts.Start()
	defer ts.Close()
	for _, tc := range []struct {
		size int
		code int
	}{
		{MaxHeaderBytes - 1024, 200},
		{MaxHeaderBytes + 1, 431},
		{4 * MaxHeaderBytes, 431},
	} {
		r := do(t, "GET", ts.URL+"/healthz", "", "X-Big", strings.Repeat("x", tc.size))
		if r.code != tc.code {
			t.Errorf("%d bytes of header: %d %s", tc.size, r.code, r.raw)
		}
		if tc.code == 431 && (r.header.Get("Content-Type") != "application/problem+json" || r.body["status"] != 431.0) {
			t.Errorf("%d bytes of header: %s %s; want problem+json", tc.size, r.header.Get("Content-Type"), r.raw)
		}
	}
}

// TestRouteCounters: a route's cached counters are the vector's own, per
// status code, under concurrent first uses.
func TestRouteCounters(t *testing.T) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "t"}, []string{"route", "code"})
	r := &routeCounters{vec: vec, route: "check"}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				r.get([]int{200, 429, 400, 500}[(g+i)%4]).Inc()
			}
		})
	}
	wg.Wait()
	for _, code := range []string{"200", "429", "400", "500"} {
		if v := testutil.ToFloat64(vec.WithLabelValues("check", code)); v != 200 {
			t.Errorf("code %s: %v, want 200", code, v)
		}
	}
	if n := testutil.CollectAndCount(vec); n != 4 {
		t.Errorf("%d series, want 4", n)
	}
}
