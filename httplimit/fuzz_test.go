package httplimit

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/sfvtest"
)

// FuzzFields checks that for any policy name New accepts, and any result,
// the RateLimit-Policy and RateLimit values parse as RFC 9651 Lists and give
// back the name and numbers they were made from.
func FuzzFields(f *testing.F) {
	f.Add("api", int64(100), int64(60_000_000), int64(42), int64(17_000_001))
	f.Add(`a "quoted" \ name`, int64(1), int64(1000), int64(0), int64(0))
	f.Add(" ", int64(1<<40), int64(400*24*3600*1_000_000), int64(-5), int64(-1))
	f.Fuzz(func(t *testing.T, name string, limit, windowUS, remaining, resetUS int64) {
		if checkPolicyName(name) != nil {
			return
		}
		rule, err := sluice.FixedWindow{Limit: limit, Window: time.Duration(windowUS) * time.Microsecond}.Rule()
		if err != nil {
			return
		}
		l := limit
		st := &Status{Allowed: true, Limits: []LimitStatus{{
			Name: name, Quota: l, Window: rule.Window,
			Result: sluice.Result{Allowed: true, Limit: l, Remaining: remaining, ResetAfter: time.Duration(resetUS) * time.Microsecond},
			policy: sfString(name) + ";q=" + strconv.FormatInt(l, 10) + ";w=" + strconv.FormatInt(seconds(rule.Window), 10),
		}}}
		st.Limits = append(st.Limits, st.Limits[0])
		for _, field := range []string{st.policyField(), st.rateLimitField()} {
			items, err := sfvtest.ParseList(field)
			if err != nil {
				t.Fatalf("%q: %v", field, err)
			}
			if len(items) != 2 {
				t.Fatalf("%q: %d items", field, len(items))
			}
			for _, it := range items {
				if it.Value != name {
					t.Fatalf("%q: name %q, want %q", field, it.Value, name)
				}
				for _, p := range it.Params {
					if n, ok := p.Value.(int64); !ok || n < 0 {
						t.Fatalf("%q: parameter %s = %v", field, p.Key, p.Value)
					}
				}
			}
		}
	})
}
