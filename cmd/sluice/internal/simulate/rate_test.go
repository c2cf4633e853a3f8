package simulate

import (
	"context"
	"testing"
	"time"
)

// TestRatePanelPerKeyLimitNoSpike: 100 keys at 1/s each under a limit of
// 10/s per key are all allowed (besides, a burst of 50 on another key at
// the start, 10 of them allowed). The rate series is the sum over all keys
// and must be drawn against the limit times the keys in the window (1000/s),
// not the per-key 10/s (which looked like a tenfold overshoot); and, being
// measured over the whole window the label names, it has no spike at the
// start (before, the first buckets divided by the elapsed time only).
func TestRatePanelPerKeyLimitNoSpike(t *testing.T) {
	plan, err := NewPlan(Options{Policies: mustPolicies(t, "algorithm=gcra,burst=10,rate=10/s"),
		Traffic: mustTraffic(t, "burst:50@0", "steady:100/s,keys=100"), Duration: 10 * time.Second, Bucket: 100 * time.Millisecond, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	res, err := plan.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p := res.Policies[0]
	if p.RateWindow != time.Second {
		t.Fatalf("rate window %v, want the policy's period 1s", p.RateWindow)
	}
	if p.Keys != 101 { // the burst's key and the hundred
		t.Fatalf("%d keys, want 101", p.Keys)
	}
	for i, b := range p.Buckets {
		// Plainly: the units of the ten buckets ending with this one
		// (none before the start), over the window's one second.
		var units int64
		for j := max(0, i-9); j <= i; j++ {
			units += p.Buckets[j].AllowedUnits
		}
		if want := float64(units) / 1; b.Admitted != want {
			t.Errorf("bucket %d: admitted %.4g/s, want %.4g/s (%d units over the 1s window)", i, b.Admitted, want, units)
		}
		limit := p.Nominal * float64(b.Keys)
		if b.Admitted > limit {
			t.Errorf("bucket %d: admitted %.4g/s over the %d keys' limit %.4g/s", i, b.Admitted, b.Keys, limit)
		}
		if i >= 10 && (b.Keys != 100 || b.Admitted != 100) {
			t.Errorf("bucket %d, past the burst's window: %d keys, %.4g/s; want 100 keys at 100/s", i, b.Keys, b.Admitted)
		}
	}
}
