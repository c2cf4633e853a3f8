package httplimit

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestPeriodSeconds: RateLimit-Policy's w is the period in whole seconds,
// rounded up, and at least 1.
func TestPeriodSeconds(t *testing.T) {
	for _, c := range []struct {
		p sluice.Policy
		w int64
	}{
		{sluice.TokenBucket{Capacity: 10, Rate: 10, Per: time.Second}, 1},
		{sluice.TokenBucket{Capacity: 3, Rate: 3, Per: time.Second}, 1}, // 999999µs
		{sluice.GCRA{Rate: 10, Per: time.Second, Burst: 25}, 3},         // 2.5s
		{sluice.FixedWindow{Limit: 5, Window: 1500 * time.Microsecond}, 1},
		{sluice.SlidingWindow{Limit: 5, Window: time.Minute}, 60},
		{sluice.FixedWindow{Limit: 5, Calendar: sluice.Calendar{Unit: sluice.Day, Zone: time.UTC}}, 86400},
	} {
		r, err := c.p.Rule()
		if err != nil {
			t.Fatal(err)
		}
		if got := periodSeconds(r); got != c.w {
			t.Errorf("%v: w=%d, want %d", r, got, c.w)
		}
	}
}
