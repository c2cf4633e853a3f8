package server

import (
	"strings"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice"
)

const envoyInForceYAML = `
admin:
  token_env: SLUICE_TEST_TOKEN
policies:
  - {name: api, algorithm: fixed_window, limit: 100, window: 1h, overrides: true}
domains:
  - domain: edge
    descriptors:
      - {key: api_key, policy: api}
`

// TestEnvoyRuleInForce: under a key override with its own limit and
// window, Envoy's answer (gRPC and POST /json) describes the override's
// rule, as /v1/check does (TestRuleInForce): current_limit is the
// override's limit per its window, duration_until_reset within that
// window; without an override, the policy's.
func TestEnvoyRuleInForce(t *testing.T) {
	s, ts := newTestServer(t, envoyInForceYAML)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{desc("api_key", "k")}}
	ask := func() *rlsv3.RateLimitResponse_DescriptorStatus {
		t.Helper()
		resp, err := s.envoy.Decide(t.Context(), req)
		if err != nil || len(resp.Statuses) != 1 {
			t.Fatalf("%v %v", resp, err)
		}
		return resp.Statuses[0]
	}
	ds := ask()
	if l := ds.CurrentLimit; l.GetRequestsPerUnit() != 100 || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR || ds.LimitRemaining != 99 {
		t.Errorf("the policy's answer: %v", ds)
	}
	key := sluice.Identity("edge", "api_key", "k")
	exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if r := do(t, "PUT", ts.URL+"/v1/overrides/api/"+key, `{"limit":50,"window":"10m","expires":"`+exp+`"}`,
		"Authorization", "Bearer "+testToken); r.code != 200 {
		t.Fatalf("PUT override: %d %s", r.code, r.raw)
	}
	ds = ask()
	l := ds.CurrentLimit
	if l.GetName() != "api" || l.GetRequestsPerUnit() != 50 || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND ||
		l.GetUnitMultiplier().GetValue() != 600 {
		t.Errorf("current_limit under the override %v, want 50 per 600 seconds", l)
	}
	if d := ds.DurationUntilReset.AsDuration(); d <= 0 || d > 10*time.Minute {
		t.Errorf("duration_until_reset under the override %v, want within its 10m window", d)
	}
	if ds.LimitRemaining > 50 {
		t.Errorf("limit_remaining %d over the override's limit", ds.LimitRemaining)
	}
	// POST /json answers the same.
	r := do(t, "POST", ts.URL+"/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"api_key","value":"k"}]}]}`)
	if r.code != 200 || !strings.Contains(r.raw, `"requestsPerUnit":50,"unit":"SECOND","unitMultiplier":600`) {
		t.Errorf("POST /json under the override: %d %s", r.code, r.raw)
	}
}
