package benchmarks

import (
	"testing"
	"time"
)

func TestHistogramQuantiles(t *testing.T) {
	var h Histogram
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {1, 1000 * time.Microsecond}} {
		got := h.Quantile(c.q)
		if d := float64(got-c.want) / float64(c.want); d < -0.03 || d > 0.03 {
			t.Errorf("Quantile(%v) = %v, want %v within 3%%", c.q, got, c.want)
		}
	}
	var small Histogram
	small.Record(40 * time.Nanosecond)
	if got := small.Quantile(0.5); got != 40*time.Nanosecond {
		t.Errorf("exact bucket: got %v, want 40ns", got)
	}
	var o Histogram
	o.Merge(&h)
	if o.Count() != 1000 || o.Quantile(0.5) != h.Quantile(0.5) {
		t.Errorf("Merge: count %d, p50 %v", o.Count(), o.Quantile(0.5))
	}
}

func TestBucketsContiguous(t *testing.T) {
	prev := -1
	for v := uint64(0); v < 1<<16; v++ {
		b := histBucket(v)
		if b != prev && b != prev+1 {
			t.Fatalf("bucket of %d is %d after %d", v, b, prev)
		}
		if lo := histValue(b); time.Duration(v) < lo-time.Duration(v>>5)-1 {
			t.Fatalf("value %d in bucket %d whose middle is %v", v, b, lo)
		}
		prev = b
	}
}

func TestTargets(t *testing.T) {
	all, err := Targets("all")
	if err != nil || len(all) != len(SluiceAlgorithms)+len(SluiceGoRedisAlgorithms)+len(Peers) {
		t.Fatalf("Targets(all) = %d targets, %v", len(all), err)
	}
	some, err := Targets("sluice,throttled")
	if err != nil || len(some) != len(SluiceAlgorithms)+1 {
		t.Fatalf("Targets(sluice,throttled) = %d targets, %v", len(some), err)
	}
	if one, err := Targets("sluice-goredis/sliding_log"); err != nil || len(one) != 1 || one[0].Client != "go-redis" {
		t.Errorf("Targets(sluice-goredis/sliding_log) = %v, %v", one, err)
	}
	if _, err := Targets("sluice/leaky"); err == nil {
		t.Error("Targets(sluice/leaky): no error")
	}
}
