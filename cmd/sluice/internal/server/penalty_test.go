package server

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice/cmd/sluice/internal/envoy"
)

const penaltyYAML = `
admin:
  token_env: SLUICE_TEST_TOKEN
policies:
  - {name: login, algorithm: fixed_window, limit: 1, window: 720h,
     penalty: {after: 2, within: 1m, block: 10m, max_block: 40m, forgive: 24h}}
  - {name: plain, algorithm: fixed_window, limit: 1, window: 1h}
forward_auth:
  trusted_proxies: [10.0.0.0/8]
  routes:
    - {path_prefix: /login, limits: [{policy: login, key: client_ip}]}
`

// TestPenaltyServe: a policy's penalty blocks a key in /v1/check answers
// ("blocked": true, the retry the block's end, X-RateLimit-Blocked), in
// forward-auth answers, counts sluice_blocks_total, and DELETE
// /v1/keys/... lifts the block; reservations of such a policy are
// refused.
func TestPenaltyServe(t *testing.T) {
	s, ts := newTestServer(t, penaltyYAML)
	check := func() response { return do(t, "POST", ts.URL+"/v1/check", `{"policy":"login","key":"k"}`) }
	check()
	if r := check(); r.body["blocked"] != nil || r.header.Get("X-RateLimit-Blocked") != "" {
		t.Fatalf("the first refusal blocks nothing: %s", r.raw)
	}
	r := check()
	if r.body["blocked"] != true || r.body["block_started"] != true || r.body["retry_after_ms"] != float64(600_000) || r.header.Get("X-RateLimit-Blocked") != `"login"` || r.header.Get("Retry-After") != "600" {
		t.Fatalf("the second refusal starts a block of 10 minutes: %v %s", r.header, r.raw)
	}
	if r := check(); r.body["blocked"] != true || r.body["block_started"] != nil {
		t.Fatalf("blocked: %s", r.raw)
	}
	for i := range 3 {
		w := fwd(s, "GET", "h", "/login", "192.0.2.9")
		blocked := hget(w, "X-RateLimit-Blocked")
		if (i == 2) != (blocked == `"login"`) || (i > 0) != (w.Code == 429) {
			t.Fatalf("forward auth %d: %d %v", i+1, w.Code, w.Header())
		}
	}
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range []string{`sluice_blocks_total{limiter="login.fixed_window"} 2`, `sluice_blocked_total{limiter="login.fixed_window"} 3`} {
		if !strings.Contains(string(body), line) {
			t.Errorf("/metrics lacks %s", line)
		}
	}
	if r := do(t, "DELETE", ts.URL+"/v1/keys/login/k", "", "Authorization", "Bearer "+testToken); r.code != 200 {
		t.Fatalf("reset: %d %s", r.code, r.raw)
	}
	if r := check(); r.body["allowed"] != true {
		t.Fatalf("reset lifts the block: %s", r.raw)
	}
	r = do(t, "POST", ts.URL+"/v1/reservations/reserve", `{"policy":"login","key":"k","estimate":1}`)
	if r.code != 400 || !strings.Contains(r.raw, "has a penalty") {
		t.Fatalf("a reservation of a policy with a penalty: %d %s", r.code, r.raw)
	}
}

// TestPenaltyEnvoy: an Envoy descriptor whose policy has a penalty is
// answered OVER_LIMIT while the key is blocked, with the block's end as
// its duration until reset.
func TestPenaltyEnvoy(t *testing.T) {
	_, c, _ := startEnvoy(t, `
policies:
  - {name: p, algorithm: fixed_window, limit: 1, window: 720h, penalty: {after: 2, within: 1m, block: 10m}}
domains:
  - domain: d
    descriptors:
      - {key: k, policy: p}
`, envoy.Options{})
	var codes []rlsv3.RateLimitResponse_Code
	var last *rlsv3.RateLimitResponse
	for range 4 {
		r, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonrl.RateLimitDescriptor{desc("k", "v")}})
		if err != nil {
			t.Fatal(err)
		}
		codes, last = append(codes, r.OverallCode), r
	}
	want := []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OVER_LIMIT}
	if !slices.Equal(codes, want) {
		t.Fatalf("codes %v, want %v", codes, want)
	}
	if d := last.Statuses[0].DurationUntilReset.AsDuration(); d <= 9*time.Minute || d > 10*time.Minute {
		t.Fatalf("duration until reset %v, want the block's end (10m)", d)
	}
}
