package sluice_test

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// countingStore counts the decisions that reach the store (a memstore,
// whose delete notices it passes on: the deny cache is on by default).
type countingStore struct {
	*memstore.Store
	calls atomic.Int64
}

func (s *countingStore) Do(ctx context.Context, batch []driver.Op) error {
	s.calls.Add(int64(len(batch)))
	return s.Store.Do(ctx, batch)
}

func TestDenyCache(t *testing.T) {
	ctx := context.Background()
	for _, p := range []sluice.Policy{
		sluice.FixedWindow{Limit: 2, Window: time.Minute},
		sluice.SlidingLog{Limit: 2, Window: time.Minute},
		sluice.SlidingWindow{Limit: 2, Window: time.Minute},
		sluice.TokenBucket{Capacity: 2, Rate: 1, Per: time.Minute},
		sluice.GCRA{Rate: 1, Per: time.Minute, Burst: 2},
	} {
		clock := sluicetest.NewClock()
		store := &countingStore{Store: memstore.New()}
		l, _ := sluice.New(store, p, sluice.WithClock(clock.Now))
		l.AllowN(ctx, "k", 2)
		first, _ := l.Allow(ctx, "k")
		if first.Allowed {
			t.Fatalf("%v: not refused", l.Rule())
		}
		before := store.calls.Load()
		for i := range 1000 {
			clock.Advance(time.Millisecond)
			res, _ := l.Allow(ctx, "k")
			if res.Allowed {
				t.Fatalf("%v: allowed after %d refusals", l.Rule(), i)
			}
			if want := first.RetryAfter - time.Duration(i+1)*time.Millisecond; res.RetryAfter != want {
				t.Fatalf("%v: cached RetryAfter %v, want %v", l.Rule(), res.RetryAfter, want)
			}
		}
		if n := store.calls.Load() - before; n != 0 {
			t.Fatalf("%v: %d refused requests reached the store, want 0", l.Rule(), n)
		}
		// A smaller cost is not answered from the cache of a larger one.
		l.AllowN(ctx, "k", 0)
		if n := store.calls.Load() - before; n != 0 {
			t.Fatalf("%v: a peek (cost 1) after a refusal of cost 1 reached the store", l.Rule())
		}
		// At RetryAfter, the store decides again and allows.
		clock.Set(first.RetryAfter)
		if res, _ := l.Allow(ctx, "k"); !res.Allowed {
			t.Fatalf("%v: refused at RetryAfter: %+v", l.Rule(), res)
		}
		// Reset clears the cache.
		l.AllowN(ctx, "k", 2)
		l.Reset(ctx, "k")
		if res, _ := l.Allow(ctx, "k"); !res.Allowed {
			t.Fatalf("%v: refused after Reset: %+v", l.Rule(), res)
		}
	}
}

func TestDenyCacheSkipsCountRejected(t *testing.T) {
	store := &countingStore{Store: memstore.New()}
	l, _ := sluice.New(store, sluice.SlidingLog{Limit: 1, Window: time.Minute, CountRejected: true})
	for range 10 {
		l.Allow(context.Background(), "k")
	}
	if n := store.calls.Load(); n != 10 {
		t.Fatalf("%d of 10 requests reached the store; CountRejected needs them all", n)
	}
}

func TestDenyCacheOff(t *testing.T) {
	store := &countingStore{Store: memstore.New()}
	l, _ := sluice.New(store, sluice.GCRA{Rate: 1, Per: time.Minute, Burst: 1}, sluice.WithDenyCache(false))
	for range 10 {
		l.Allow(context.Background(), "k")
	}
	if n := store.calls.Load(); n != 10 {
		t.Fatalf("%d of 10 requests reached the store with the cache off", n)
	}
}

// BenchmarkDenyCacheHotKey measures refusals of one hot key answered from
// the deny cache: no store round trip, no allocation beyond the key.
func BenchmarkDenyCacheHotKey(b *testing.B) {
	l, _ := sluice.New(memstore.New(), sluice.GCRA{Rate: 1, Per: time.Hour, Burst: 1})
	ctx := context.Background()
	l.Allow(ctx, "hot")
	if res, _ := l.Allow(ctx, "hot"); res.Allowed {
		b.Fatal("not refused")
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if res, _ := l.Allow(ctx, "hot"); res.Allowed {
				b.Fatal("allowed")
			}
		}
	})
}

// TestDenyCacheDifferential: a limiter with the deny cache answers exactly
// as the same store without it, on random sequences of costs and times
// (every Result field), and for a larger cost the cache never answers with
// a smaller cost's RetryAfter.
func TestDenyCacheDifferential(t *testing.T) {
	ctx := context.Background()
	for _, p := range []sluice.Policy{
		sluice.FixedWindow{Limit: 5, Window: time.Second},
		sluice.SlidingLog{Limit: 5, Window: time.Second},
		sluice.SlidingWindow{Limit: 5, Window: time.Second},
		sluice.TokenBucket{Capacity: 5, Rate: 1, Per: time.Second},
		sluice.GCRA{Rate: 1, Per: time.Second, Burst: 5},
	} {
		clock := sluicetest.NewClock()
		cached, _ := sluice.New(memstore.New(memstore.WithClock(clock.Now)), p, sluice.WithClock(clock.Now))
		plain, _ := sluice.New(memstore.New(memstore.WithClock(clock.Now)), p, sluice.WithClock(clock.Now), sluice.WithDenyCache(false))
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range 3000 {
			clock.Advance(time.Duration(rng.IntN(3)) * time.Duration(rng.IntN(100_000)) * time.Microsecond)
			cost := rng.Int64N(6)
			a, err1 := cached.AllowN(ctx, "k", cost)
			b, err2 := plain.AllowN(ctx, "k", cost)
			if err1 != nil || err2 != nil || a != b {
				t.Fatalf("%v step %d cost %d:\n cached %+v %v\n store  %+v %v", cached.Rule(), i, cost, a, err1, b, err2)
			}
		}
	}
	// The example of the bug: a bucket refused a cost of 1 for 500ms; a cost
	// of 5 needs 4.5s more.
	clock := sluicetest.NewClock()
	l, _ := sluice.New(memstore.New(), sluice.TokenBucket{Capacity: 5, Rate: 1, Per: time.Second}, sluice.WithClock(clock.Now))
	l.AllowN(ctx, "k", 5)
	clock.Advance(500 * time.Millisecond)
	if res, _ := l.Allow(ctx, "k"); res.Allowed || res.RetryAfter != 500*time.Millisecond {
		t.Fatalf("cost 1: %+v", res)
	}
	if res, _ := l.AllowN(ctx, "k", 5); res.RetryAfter != 4500*time.Millisecond || res.Remaining != 0 {
		t.Fatalf("cost 5 after a cached refusal of cost 1: %+v, want RetryAfter 4.5s", res)
	}
}

// TestDenyCacheAnswersWhatFollows: the cases docs/batching.md lists are answered
// without a round trip; the others reach the store.
func TestDenyCacheAnswersWhatFollows(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		p           sluice.Policy
		take, first int64 // taken, then refused
		then        int64 // a later cost
		local       bool  // answered by the cache
	}{
		{sluice.FixedWindow{Limit: 5, Window: time.Minute}, 5, 1, 3, true},
		{sluice.TokenBucket{Capacity: 5, Rate: 1, Per: time.Minute}, 5, 1, 4, true},
		{sluice.GCRA{Rate: 1, Per: time.Minute, Burst: 5}, 5, 2, 5, true},
		{sluice.SlidingLog{Limit: 5, Window: time.Minute}, 5, 1, 1, true},
		{sluice.SlidingLog{Limit: 5, Window: time.Minute}, 5, 1, 2, false},
		{sluice.SlidingWindow{Limit: 5, Window: time.Minute}, 5, 1, 1, true},
		{sluice.SlidingWindow{Limit: 5, Window: time.Minute}, 5, 1, 2, false},
	} {
		clock := sluicetest.NewClock()
		store := &countingStore{Store: memstore.New(memstore.WithClock(clock.Now))}
		l, _ := sluice.New(store, c.p, sluice.WithClock(clock.Now))
		l.AllowN(ctx, "k", c.take)
		if res, _ := l.AllowN(ctx, "k", c.first); res.Allowed {
			t.Fatalf("%v: cost %d allowed", l.Rule(), c.first)
		}
		before := store.calls.Load()
		clock.Advance(time.Second)
		if res, _ := l.AllowN(ctx, "k", c.then); res.Allowed {
			t.Fatalf("%v: cost %d allowed", l.Rule(), c.then)
		}
		if local := store.calls.Load() == before; local != c.local {
			t.Errorf("%v: cost %d after a refusal of %d answered locally: %v, want %v", l.Rule(), c.then, c.first, local, c.local)
		}
	}
}
