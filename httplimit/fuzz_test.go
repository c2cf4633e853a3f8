package httplimit

import (
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit/sfvtest"
)

// FuzzFields checks that for any policy names New accepts, any algorithm and
// any result, every header WriteHeaders sets passes sfvtest.CheckHeaders
// (RFC 9651 Lists for the draft's fields, integers for the others) and gives
// back the names and numbers it was made from.
func FuzzFields(f *testing.F) {
	f.Add("api", "b", uint8(0), int64(100), int64(60_000_000), int64(42), int64(17_000_001), int64(0), false, int64(1))
	f.Add(`a "quoted" \ name`, "x", uint8(3), int64(1), int64(1000), int64(0), int64(0), int64(5), true, int64(0))
	f.Add(" ", "  ", uint8(4), int64(1<<40), int64(400*24*3600*1_000_000), int64(-5), int64(-1), int64(1), false, int64(7))
	policies := func(limit, paramUS int64) []sluice.Policy {
		d := time.Duration(paramUS) * time.Microsecond
		return []sluice.Policy{
			sluice.FixedWindow{Limit: limit, Window: d},
			sluice.SlidingLog{Limit: limit, Window: d},
			sluice.SlidingWindow{Limit: limit, Window: d},
			sluice.TokenBucket{Capacity: limit, Rate: 1, Per: d},
			sluice.GCRA{Rate: 1, Per: d, Burst: limit},
		}
	}
	f.Fuzz(func(t *testing.T, name, other string, alg uint8, limit, paramUS, remaining, resetUS, retryUS int64, refused bool, cost int64) {
		if checkPolicyName(name) != nil || checkPolicyName(other) != nil || name == other {
			return
		}
		ps := policies(limit, paramUS)
		rule, err := ps[int(alg)%len(ps)].Rule()
		if err != nil {
			return
		}
		res := sluice.Result{Allowed: !refused, Limit: limit, Remaining: min(max(remaining, 0), limit),
			ResetAfter: time.Duration(max(resetUS, 0)) * time.Microsecond}
		if refused {
			res.RetryAfter = time.Duration(max(retryUS, 1)) * time.Microsecond
		}
		// The other limit allowed; on a refusal its unit was given back.
		otherRes := sluice.Result{Allowed: true, Limit: limit, Remaining: limit, ResetAfter: 0}
		st := &Status{Allowed: !refused, Limits: []LimitStatus{
			{Name: name, Rule: rule, Cost: cost, Result: res},
			{Name: other, Rule: rule, Cost: 1, Result: otherRes},
		}}
		for _, o := range []HeaderOptions{{}, {ResetEpoch: true, Now: time.Unix(1_800_000_000, 123)}} {
			h := http.Header{}
			WriteHeaders(h, st, o)
			got, err := sfvtest.CheckHeaders(h)
			if err != nil {
				t.Fatalf("%v: %v", h, err)
			}
			if len(got.Policies) != 2 || got.Policies[0].Name != name || got.Policies[0].Q != limit || got.Policies[0].W != periodSeconds(rule) {
				t.Fatalf("RateLimit-Policy %q: %+v", h.Get(HeaderPolicy), got.Policies)
			}
			if l, ok := got.Limit(name); !ok || l.R != res.Remaining {
				t.Fatalf("RateLimit %q: %+v", h.Get(HeaderRateLimit), got.Limits)
			}
			if got.HasRetryAfter != refused {
				t.Fatalf("Retry-After %q on a refusal: %v", h.Get(HeaderRetryAfter), refused)
			}
		}
	})
}
