package topk

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// zipf draws items with a skew, as refused keys are: a few hammer, many
// try once.
func stream(seed uint64, n, distinct int) []string {
	rng := rand.New(rand.NewPCG(seed, 1))
	z := rand.NewZipf(rng, 1.1+rng.Float64(), 1, uint64(distinct-1))
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("key-%d", z.Uint64())
	}
	return out
}

// TestSketchErrorBound compares the sketch with an exact count on random
// streams: every kept item's true count is within [Count−Err, Count], Err
// and Min are at most N/k, and every item above N/k is kept.
func TestSketchErrorBound(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 2))
		k := 1 + rng.IntN(64)
		items := stream(seed, 1+rng.IntN(20000), 2+rng.IntN(5000))
		s := NewSketch(k)
		exact := map[string]int64{}
		for _, it := range items {
			w := int64(1)
			if rng.IntN(10) == 0 {
				w = int64(1 + rng.IntN(5))
			}
			s.Add(it, w)
			exact[it] += w
		}
		var n int64
		for _, c := range exact {
			n += c
		}
		if s.N() != n {
			t.Fatalf("seed %d: N %d, want %d", seed, s.N(), n)
		}
		bound := n / int64(k)
		kept := map[string]bool{}
		cs := s.Counters()
		if len(cs) > k {
			t.Fatalf("seed %d: %d counters for k=%d", seed, len(cs), k)
		}
		for i, c := range cs {
			kept[c.Item] = true
			if tr := exact[c.Item]; tr > c.Count || tr < c.Count-c.Err {
				t.Fatalf("seed %d k=%d: %s true %d outside [%d, %d]", seed, k, c.Item, tr, c.Count-c.Err, c.Count)
			}
			if c.Err > bound {
				t.Fatalf("seed %d: error %d above N/k = %d", seed, c.Err, bound)
			}
			if i > 0 && c.Count > cs[i-1].Count {
				t.Fatalf("seed %d: counters not sorted", seed)
			}
		}
		if s.Min() > bound {
			t.Fatalf("seed %d: Min %d above N/k = %d", seed, s.Min(), bound)
		}
		for item, c := range exact {
			if !kept[item] && c > s.Min() {
				t.Fatalf("seed %d: %s seen %d times, more than Min %d, and not kept", seed, item, c, s.Min())
			}
			if c > bound && !kept[item] {
				t.Fatalf("seed %d: %s seen %d > N/k = %d times and not kept", seed, item, c, bound)
			}
		}
	}
}

// TestWindowErrorBound: over any span, each entry's true count (exact,
// over the same whole slots) is within [Count−Error, Count], and every item
// above total/k per slot is listed.
func TestWindowErrorBound(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		k, slots := 1+rng.IntN(16), 1+rng.IntN(8)
		slot := time.Second
		w := NewWindow(k, slots, slot)
		start := time.Unix(1_800_000_000, 0)
		type ev struct {
			at   time.Time
			item string
		}
		var evs []ev
		items := stream(seed, 5000, 300)
		at := start
		for _, it := range items {
			at = at.Add(time.Duration(rng.IntN(5)) * time.Millisecond)
			evs = append(evs, ev{at, it})
			w.Add(at, it)
		}
		now := at
		for span := slot; span <= w.Span()+slot; span += slot {
			got, total := w.Top(now, span, 1<<30)
			// The exact count over the same slots.
			cut := (now.UnixNano()/int64(slot) - int64(min(int(span/slot), slots)) + 1) * int64(slot)
			exact := map[string]int64{}
			var n int64
			for _, e := range evs {
				if e.at.UnixNano() >= cut {
					exact[e.item]++
					n++
				}
			}
			if total != n {
				t.Fatalf("seed %d span %v: total %d, want %d", seed, span, total, n)
			}
			listed := map[string]bool{}
			for _, e := range got {
				listed[e.Item] = true
				if tr := exact[e.Item]; tr > e.Count || tr < e.Count-e.Error {
					t.Fatalf("seed %d span %v: %s true %d outside [%d, %d]", seed, span, e.Item, tr, e.Count-e.Error, e.Count)
				}
			}
			for item, c := range exact {
				if c > n/int64(k) && !listed[item] {
					t.Fatalf("seed %d span %v: %s counted %d > total/k = %d, not listed", seed, span, item, c, n/int64(k))
				}
			}
		}
		// Slots older than the window are forgotten.
		if got, total := w.Top(now.Add(w.Span()+slot), w.Span(), 10); len(got) != 0 || total != 0 {
			t.Fatalf("seed %d: %d entries, total %d after the window passed", seed, len(got), total)
		}
	}
}

// TestSketchMemoryBounded: a million distinct items keep k counters.
func TestSketchMemoryBounded(t *testing.T) {
	s := NewSketch(8)
	for i := range 1_000_000 {
		s.Add(fmt.Sprint(i), 1)
	}
	if len(s.heap) != 8 || len(s.index) != 8 {
		t.Fatalf("%d counters, %d index entries", len(s.heap), len(s.index))
	}
}
