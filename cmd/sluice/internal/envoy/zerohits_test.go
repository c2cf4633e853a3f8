package envoy

import (
	"log/slog"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const (
	envoyYAML  = "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: hour, requests_per_unit: 2}}\n"
	sluiceYAML = "domains:\n  - domain: d\n    descriptors:\n      - {key: k, rate_limit: {unit: hour, requests_per_unit: 2}}\n"
)

// TestZeroHitsAtLimit: a descriptor asking 0 hits (hits_addend 0: check
// only, as Envoy's token quotas ask on the request path) is over the limit
// only when count + 0 > limit, as upstream: at the limit it answers OK with
// 0 remaining, and OVER_LIMIT once the count has passed it. Configured
// limits and per-request overrides alike.
func TestZeroHitsAtLimit(t *testing.T) {
	// Windows are aligned on the clock: keep the steps clear of an hour's edge.
	if left := time.Hour - time.Duration(time.Now().UnixNano())%time.Hour; left < 10*time.Second {
		time.Sleep(left + time.Second)
	}
	OK, OVER := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	for _, tc := range []struct {
		name string
		yaml string
		ov   *commonrl.RateLimitDescriptor_RateLimitOverride
		// afterOver is the answer to 0 hits once a hit was refused: under
		// all_or_nothing a refused hit is not counted, so the count is still
		// at the limit.
		afterOver rlsv3.RateLimitResponse_Code
	}{
		{"configured", envoyYAML, nil, OVER},
		{"override", envoyYAML, &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: 3}, OVER}, // HOUR
		{"all_or_nothing", sluiceYAML, nil, OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, tc.yaml)
			s := New(f, prometheus.NewRegistry(), slog.New(slog.DiscardHandler), 1<<10, Options{})
			call := func(hits uint64) *rlsv3.RateLimitResponse_DescriptorStatus {
				t.Helper()
				d := &commonrl.RateLimitDescriptor{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "k", Value: tc.name}},
					HitsAddend: wrapperspb.UInt64(hits), Limit: tc.ov}
				resp, err := s.Decide(t.Context(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonrl.RateLimitDescriptor{d}})
				if err != nil {
					t.Fatal(err)
				}
				return resp.Statuses[0]
			}
			for i, step := range []struct {
				hits   uint64
				code   rlsv3.RateLimitResponse_Code
				remain uint32
			}{
				{0, OK, 2}, {1, OK, 1}, {0, OK, 1}, {1, OK, 0},
				{0, OK, 0}, // at the limit: count + 0 is not over it
				{0, OK, 0},
				{1, OVER, 0},         // counted: the count is now past the limit
				{0, tc.afterOver, 0}, // count + 0 > limit when the refused hit counted
			} {
				st := call(step.hits)
				if st.Code != step.code || st.LimitRemaining != step.remain || st.CurrentLimit.GetRequestsPerUnit() != 2 {
					t.Errorf("step %d (hits %d): %v, want %v with %d remaining", i, step.hits, st, step.code, step.remain)
				}
			}
		})
	}
}

// TestZeroHitsNamedPolicy: a descriptor asking 0 hits of a named Sluice
// policy is answered as that policy peeks: whether one more request would
// be allowed, so OVER_LIMIT at the limit.
func TestZeroHitsNamedPolicy(t *testing.T) {
	if left := time.Hour - time.Duration(time.Now().UnixNano())%time.Hour; left < 10*time.Second {
		time.Sleep(left + time.Second)
	}
	f := newFake(t, "policies:\n  - {name: api, algorithm: fixed_window, limit: 1, window: 1h}\ndomains:\n  - domain: d\n    descriptors:\n      - {key: k, policy: api}\n")
	s := New(f, prometheus.NewRegistry(), slog.New(slog.DiscardHandler), 1<<10, Options{})
	call := func(hits uint64) rlsv3.RateLimitResponse_Code {
		t.Helper()
		d := &commonrl.RateLimitDescriptor{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}, HitsAddend: wrapperspb.UInt64(hits)}
		resp, err := s.Decide(t.Context(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonrl.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Statuses[0].Code
	}
	if c := call(0); c != rlsv3.RateLimitResponse_OK {
		t.Errorf("0 hits, none taken: %v", c)
	}
	if c := call(1); c != rlsv3.RateLimitResponse_OK {
		t.Errorf("1 hit: %v", c)
	}
	if c := call(0); c != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("0 hits at the limit of a named policy: %v, want OVER_LIMIT (no more would be allowed)", c)
	}
}
