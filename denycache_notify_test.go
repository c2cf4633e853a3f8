package sluice_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// notifier is a DeleteNotifier whose notices arrive when the test says
// (deliver), as they do from another process: DeleteNotify deletes at
// once and queues the notice. inFlight, when set, runs inside the next Do
// after the store decided and before the limiter sees the answer: a reset
// made by another process while the request is on the wire.
type notifier struct {
	*memstore.Store
	w        driver.DeleteWatcher
	pending  []string
	inFlight func()
	calls    int
}

func (s *notifier) Do(ctx context.Context, batch []driver.Op) error {
	s.calls++
	err := s.Store.Do(ctx, batch)
	if f := s.inFlight; f != nil {
		s.inFlight = nil
		f()
	}
	return err
}

func (s *notifier) DeleteNotify(ctx context.Context, prefix string, keys ...string) (int, error) {
	if err := s.Store.Delete(ctx, keys...); err != nil {
		return 0, err
	}
	s.pending = append(s.pending, keys...)
	return 1, nil
}

func (s *notifier) WatchDeletes(prefix string, w driver.DeleteWatcher) func() {
	if s.w != nil {
		panic("one watcher only")
	}
	s.w = w
	return func() {}
}

func (s *notifier) deliver() {
	for _, k := range s.pending {
		s.w.Deleted(k)
	}
	s.pending = nil
}

// TestDenyCacheResetInFlight: a refusal whose request was on the wire when
// another process reset the key (the store decided it before the delete)
// is not cached once the reset's notice arrived before the answer, and a
// cached refusal is dropped by a notice; the cache answers nothing before
// the store says its notices reach it.
func TestDenyCacheResetInFlight(t *testing.T) {
	ctx := context.Background()
	s := &notifier{Store: memstore.New()}
	l, err := sluice.New(s, sluice.GCRA{Rate: 1, Per: time.Hour, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := sluice.New(s, sluice.GCRA{Rate: 1, Per: time.Hour, Burst: 1}, sluice.WithDenyCache(false))

	l.Allow(ctx, "k")
	l.Allow(ctx, "k") // refused
	before := s.calls
	l.Allow(ctx, "k")
	if s.calls == before {
		t.Fatal("answered from the cache before the store reported Watching(true)")
	}
	s.w.Watching(true)

	// A cached refusal, then a reset elsewhere: its notice drops it.
	l.Allow(ctx, "k")
	before = s.calls
	if res, _ := l.Allow(ctx, "k"); res.Allowed || s.calls != before {
		t.Fatalf("not refused from the cache: %+v", res)
	}
	other.Reset(ctx, "k")
	s.deliver()
	if res, _ := l.Allow(ctx, "k"); !res.Allowed {
		t.Fatalf("refused after a reset whose notice arrived: %+v", res)
	}

	// A refusal in flight across a reset and its notice is not cached.
	s.inFlight = func() { other.Reset(ctx, "k"); s.deliver() }
	if res, _ := l.Allow(ctx, "k"); res.Allowed {
		t.Fatalf("the refusal in flight was allowed: %+v", res)
	}
	if res, _ := l.Allow(ctx, "k"); !res.Allowed {
		t.Fatalf("refused from a refusal decided before the reset whose notice had arrived: %+v", res)
	}

	// Watching(false): the cache answers nothing, and what it held is gone.
	l.Allow(ctx, "k")
	s.w.Watching(false)
	before = s.calls
	l.Allow(ctx, "k")
	if s.calls == before {
		t.Fatal("answered from the cache while the store's notices do not reach it")
	}
}

// TestDenyCacheNoticesProperty: on random timelines of requests, resets by
// another process (some while a request is in flight), notices arriving
// late and subscriptions lost and regained, every answer the deny cache
// gives while no notice is pending is the store's own: a limiter without
// the cache, asked the same right after, answers the same.
func TestDenyCacheNoticesProperty(t *testing.T) {
	ctx := context.Background()
	for _, p := range []sluice.Policy{
		sluice.GCRA{Rate: 2, Per: time.Second, Burst: 3},
		sluice.FixedWindow{Limit: 3, Window: time.Second},
		sluice.TokenBucket{Capacity: 3, Rate: 2, Per: time.Second},
	} {
		for seed := range uint64(20) {
			rng := rand.New(rand.NewPCG(seed, 7))
			clock := sluicetest.NewClock()
			s := &notifier{Store: memstore.New(memstore.WithClock(clock.Now))}
			cached, err := sluice.New(s, p, sluice.WithClock(clock.Now))
			if err != nil {
				t.Fatal(err)
			}
			plain, _ := sluice.New(s, p, sluice.WithClock(clock.Now), sluice.WithDenyCache(false))
			s.w.Watching(true)
			keys := []string{"a", "b"}
			for step := range 400 {
				key := keys[rng.IntN(len(keys))]
				switch rng.IntN(10) {
				case 0:
					plain.Reset(ctx, key) // another process
				case 1:
					s.deliver()
				case 2:
					clock.Advance(time.Duration(rng.IntN(300)) * time.Millisecond)
				case 3:
					live := rng.IntN(2) == 0
					if live {
						s.deliver() // a new subscription: what was missed is dropped
					}
					s.w.Watching(live)
				case 4:
					s.inFlight = func() {
						plain.Reset(ctx, key)
						if rng.IntN(2) == 0 {
							s.deliver()
						}
					}
					fallthrough
				default:
					cost := rng.Int64N(3)
					before := s.calls
					got, err := cached.AllowN(ctx, key, cost)
					s.inFlight = nil
					if err != nil {
						t.Fatal(err)
					}
					if s.calls != before && len(s.pending) == 0 && got.Allowed {
						continue
					}
					if s.calls == before && len(s.pending) == 0 {
						want, _ := plain.AllowN(ctx, key, cost)
						if want.Allowed || want.RetryAfter != got.RetryAfter {
							t.Fatalf("%v seed %d step %d: the cache answered %+v, the store %+v", cached.Rule(), seed, step, got, want)
						}
					}
				}
			}
		}
	}
}

// plainStore is a Store that sends no delete notices; it counts the
// decisions that reach it.
type plainStore struct {
	s     *memstore.Store
	calls int
}

func (p *plainStore) Do(ctx context.Context, b []driver.Op) error {
	p.calls++
	return p.s.Do(ctx, b)
}

func (p *plainStore) Delete(ctx context.Context, keys ...string) error {
	return p.s.Delete(ctx, keys...)
}

// TestDenyCacheDefaults: off by default on a store without delete notices
// (another process's reset would be invisible to it), on when asked for;
// asked for where it can never apply, New refuses.
func TestDenyCacheDefaults(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		opts  []sluice.Option
		local bool
	}{{nil, false}, {[]sluice.Option{sluice.WithDenyCache(true)}, true}} {
		store := &plainStore{s: memstore.New()}
		l, err := sluice.New(store, sluice.GCRA{Rate: 1, Per: time.Hour, Burst: 1}, c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		l.Allow(ctx, "k")
		l.Allow(ctx, "k") // refused
		before := store.calls
		if res, _ := l.Allow(ctx, "k"); res.Allowed {
			t.Fatal("allowed")
		}
		if local := store.calls == before; local != c.local {
			t.Errorf("options %d: answered locally %v, want %v", len(c.opts), local, c.local)
		}
		if n, err := l.ResetNotify(ctx, "k"); err != nil || n != -1 {
			t.Fatalf("ResetNotify on a store without notices: %d, %v; want -1", n, err)
		}
		if res, _ := l.Allow(ctx, "k"); !res.Allowed {
			t.Fatalf("refused after this limiter's own Reset: %+v", res)
		}
	}
	for name, opts := range map[string][]sluice.Option{
		"plans":     {sluice.WithPlan("pro", sluice.GCRA{Rate: 2, Per: time.Hour, Burst: 2})},
		"overrides": {sluice.WithOverrides(true)},
	} {
		_, err := sluice.New(memstore.New(), sluice.GCRA{Rate: 1, Per: time.Hour, Burst: 1}, append(opts, sluice.WithDenyCache(true))...)
		if !errors.Is(err, sluice.ErrInvalidPolicy) {
			t.Errorf("WithDenyCache(true) with %s: %v, want ErrInvalidPolicy", name, err)
		}
	}
	_, err := sluice.New(memstore.New(), sluice.SlidingLog{Limit: 1, Window: time.Hour, CountRejected: true}, sluice.WithDenyCache(true))
	if !errors.Is(err, sluice.ErrInvalidPolicy) {
		t.Errorf("WithDenyCache(true) with CountRejected: %v, want ErrInvalidPolicy", err)
	}
}
