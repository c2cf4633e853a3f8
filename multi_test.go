package sluice_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestAllowEachCountsEachCheck: a refusal by one check gives nothing back to
// the others, and a CountRejected window counts its own refused hits.
func TestAllowEachCountsEachCheck(t *testing.T) {
	store := memstore.New()
	wide, _ := sluice.New(store, sluice.FixedWindow{Limit: 10, Window: time.Hour, CountRejected: true}, sluice.WithName("wide"))
	narrow, _ := sluice.New(store, sluice.FixedWindow{Limit: 1, Window: time.Hour, CountRejected: true}, sluice.WithName("narrow"))
	ctx := context.Background()
	checks := []sluice.Check{{Limiter: wide, Key: "k", Cost: 1}, {Limiter: narrow, Key: "k", Cost: 1}}
	want := []struct {
		allowed              bool
		wideLeft, narrowLeft int64
	}{{true, 9, 0}, {false, 8, 0}, {false, 7, 0}}
	for i, w := range want {
		d, err := sluice.AllowEach(ctx, checks)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != w.allowed || d.Results[0].Remaining != w.wideLeft || d.Results[1].Remaining != w.narrowLeft {
			t.Errorf("call %d: allowed=%v remaining %d/%d, want %v %d/%d", i, d.Allowed,
				d.Results[0].Remaining, d.Results[1].Remaining, w.allowed, w.wideLeft, w.narrowLeft)
		}
	}
	// The narrow window counted its refused hits: 3 taken of 1.
	res, _ := narrow.AllowN(ctx, "k", 0)
	if res.Allowed || res.Remaining != 0 {
		t.Errorf("narrow after refusals: %+v", res)
	}
}

// TestAllowAllRemainingAfterRefund: the allowing checks of a refused call
// report what is left once their units are back.
func TestAllowAllRemainingAfterRefund(t *testing.T) {
	store := memstore.New()
	a, _ := sluice.New(store, sluice.FixedWindow{Limit: 5, Window: time.Hour}, sluice.WithName("a"))
	b, _ := sluice.New(store, sluice.FixedWindow{Limit: 1, Window: time.Hour}, sluice.WithName("b"))
	ctx := context.Background()
	checks := []sluice.Check{{Limiter: a, Key: "k", Cost: 2}, {Limiter: b, Key: "k", Cost: 1}}
	if d, _ := sluice.AllowAll(ctx, checks); !d.Allowed || d.Results[0].Remaining != 3 {
		t.Fatalf("first call: %+v", d)
	}
	d, err := sluice.AllowAll(ctx, checks)
	if err != nil || d.Allowed {
		t.Fatalf("second call: %+v %v", d, err)
	}
	if d.Results[0].Remaining != 3 {
		t.Errorf("a reports %d remaining after the refund, want 3", d.Results[0].Remaining)
	}
}

// TestAllowAllRefundedResultIsAPeek: on a refused call, an allowing check's
// Result (Remaining and ResetAfter) is what a peek at the same instant
// answers once its units are back, for every algorithm.
func TestAllowAllRefundedResultIsAPeek(t *testing.T) {
	ctx := context.Background()
	for _, p := range []sluice.Policy{
		sluice.FixedWindow{Limit: 5, Window: time.Second},
		sluice.SlidingLog{Limit: 5, Window: time.Second},
		sluice.SlidingWindow{Limit: 5, Window: time.Second},
		sluice.TokenBucket{Capacity: 5, Rate: 5, Per: time.Second},
		sluice.GCRA{Rate: 5, Per: time.Second, Burst: 5},
	} {
		store := memstore.New()
		now := time.Unix(1_800_000_000, 0)
		clock := sluice.WithClock(func() time.Time { return now })
		a, err := sluice.New(store, p, sluice.WithName("a"), clock, sluice.WithDenyCache(false))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := sluice.New(store, sluice.FixedWindow{Limit: 1, Window: time.Hour}, sluice.WithName("b"), clock)
		// Take some of a at different times, then exhaust b.
		for _, step := range []time.Duration{0, 130 * time.Millisecond, 170 * time.Millisecond} {
			now = now.Add(step)
			if _, err := a.Allow(ctx, "k"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := b.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		now = now.Add(90 * time.Millisecond)
		d, err := sluice.AllowAll(ctx, []sluice.Check{{Limiter: a, Key: "k", Cost: 2}, {Limiter: b, Key: "k", Cost: 1}})
		if err != nil || d.Allowed || !d.Results[0].Allowed {
			t.Fatalf("%T: %+v %v", p, d, err)
		}
		peek, err := a.Peek(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Results[0]; got.Remaining != peek.Remaining || got.ResetAfter != peek.ResetAfter {
			t.Errorf("%T: refunded result %+v, a peek says %+v", p, got, peek)
		}
	}
}

// TestAllowEachRefund: a negative cost gives units back.
func TestAllowEachRefund(t *testing.T) {
	store := memstore.New()
	l, _ := sluice.New(store, sluice.FixedWindow{Limit: 3, Window: time.Hour}, sluice.WithName("r"))
	ctx := context.Background()
	l.AllowN(ctx, "k", 3)
	d, err := sluice.AllowEach(ctx, []sluice.Check{{Limiter: l, Key: "k", Cost: -2}})
	if err != nil || !d.Allowed || d.Results[0].Remaining != 2 {
		t.Fatalf("refund: %+v %v", d, err)
	}
	if _, err := sluice.AllowAll(ctx, []sluice.Check{{Limiter: l, Key: "k", Cost: -1}}); err == nil {
		t.Error("AllowAll accepted a negative cost")
	}
}

// slowGate is a store that decides on inner, except the keys of the
// limiter named "gate", which it refuses; while it does, the clock moves to
// the next window and fill runs (other requests arriving between an
// AllowAll's take and its refund). It decides a batch in order.
type slowGate struct {
	inner driver.Store
	clock *sluicetest.Clock
	to    time.Duration
	fill  func()
}

func (g *slowGate) Do(ctx context.Context, batch []driver.Op) error {
	for i := range batch {
		if !strings.Contains(batch[i].Key, ":gate:") {
			if err := g.inner.Do(ctx, batch[i:i+1]); err != nil {
				return err
			}
			continue
		}
		g.clock.Set(g.to)
		g.fill()
		batch[i].Result = driver.Result{RetryAfter: time.Hour, ResetAfter: time.Hour}
	}
	return nil
}

func (g *slowGate) Delete(ctx context.Context, keys ...string) error {
	return g.inner.Delete(ctx, keys...)
}

// TestAllowAllRefundAfterWindowEdge: an AllowAll whose refund is decided
// in a later window (on the limiter's clock), after that window's limit was
// used up meanwhile, gives nothing to the new window and deletes nothing of
// it: a limit of 3 never admits a 4th (the bug admitted 6 of 3 with a
// client clock).
func TestAllowAllRefundAfterWindowEdge(t *testing.T) {
	ctx := context.Background()
	for _, p := range []sluice.Policy{
		sluice.FixedWindow{Limit: 3, Window: time.Second},
		sluice.SlidingWindow{Limit: 3, Window: time.Second},
		sluice.SlidingLog{Limit: 3, Window: time.Second},
		sluice.TokenBucket{Capacity: 3, Rate: 3, Per: time.Second},
		sluice.GCRA{Rate: 3, Per: time.Second, Burst: 3},
	} {
		clock := sluicetest.NewClock()
		var l *sluice.Limiter
		allowed := 0
		store := &slowGate{inner: memstore.New(memstore.WithClock(clock.Now)), clock: clock, to: 3 * time.Second, fill: func() {
			for range 4 {
				if res, _ := l.Allow(ctx, "k"); res.Allowed {
					allowed++
				}
			}
		}}
		l, _ = sluice.New(store, p, sluice.WithClock(clock.Now), sluice.WithDenyCache(false))
		gate, _ := sluice.New(store, sluice.FixedWindow{Limit: 1, Window: time.Hour}, sluice.WithName("gate"), sluice.WithClock(clock.Now))
		clock.Set(999 * time.Millisecond)
		d, err := sluice.AllowAll(ctx, []sluice.Check{{Limiter: l, Key: "k", Cost: 1}, {Limiter: gate, Key: "k", Cost: 1}})
		if err != nil || d.Allowed || !d.Results[0].Allowed {
			t.Fatalf("%v: AllowAll %+v %v", l.Rule(), d, err)
		}
		for range 3 {
			if res, _ := l.Allow(ctx, "k"); res.Allowed {
				allowed++
			}
		}
		if allowed != 3 {
			t.Errorf("%v: %d allowed at 3s around a late refund, want 3", l.Rule(), allowed)
		}
	}
}

// batchCounter counts the batches and ops it is sent, and fails every
// batch with err when set.
type batchCounter struct {
	inner        driver.Store
	batches, ops int
	err          error
}

func (c *batchCounter) Do(ctx context.Context, batch []driver.Op) error {
	c.batches++
	c.ops += len(batch)
	if c.err != nil {
		return c.err
	}
	return c.inner.Do(ctx, batch)
}

func (c *batchCounter) Delete(ctx context.Context, keys ...string) error {
	return c.inner.Delete(ctx, keys...)
}

// TestAllowEachBatchPerStore: checks go to their own limiter's store, one
// batch per store, whether every limiter shares one store or not, and a
// store's error degrades only its own checks.
func TestAllowEachBatchPerStore(t *testing.T) {
	ctx := context.Background()
	a, b := &batchCounter{inner: memstore.New()}, &batchCounter{inner: memstore.New(), err: errors.New("down")}
	la, _ := sluice.New(a, sluice.FixedWindow{Limit: 1, Window: time.Hour}, sluice.WithName("a"))
	la2, _ := sluice.New(a, sluice.FixedWindow{Limit: 5, Window: time.Hour}, sluice.WithName("a2"))
	lb, _ := sluice.New(b, sluice.FixedWindow{Limit: 5, Window: time.Hour}, sluice.WithName("b"), sluice.WithFailMode(sluice.FailClosed))

	d, err := sluice.AllowEach(ctx, []sluice.Check{{Limiter: la, Key: "k", Cost: 1}, {Limiter: la2, Key: "k", Cost: 1}, {Limiter: la, Key: "k", Cost: 1}})
	if err != nil || d.Allowed || !d.Results[0].Allowed || !d.Results[1].Allowed || d.Results[2].Allowed {
		t.Fatalf("one store: %+v %v", d, err)
	}
	if a.batches != 1 || a.ops != 3 {
		t.Fatalf("one store: %d batches of %d ops, want 1 of 3", a.batches, a.ops)
	}

	d, err = sluice.AllowEach(ctx, []sluice.Check{{Limiter: la2, Key: "j", Cost: 1}, {Limiter: lb, Key: "j", Cost: 1}, {Limiter: la2, Key: "j", Cost: 1}})
	if err != nil || !d.Results[0].Allowed || d.Results[0].Degraded || !d.Results[2].Allowed || d.Results[2].Remaining != 3 {
		t.Fatalf("two stores, store a: %+v %v", d, err)
	}
	if d.Results[1].Allowed || !d.Results[1].Degraded {
		t.Fatalf("two stores, store b down: %+v, want refused as degraded", d.Results[1])
	}
	if a.batches != 2 || a.ops != 5 || b.batches != 1 || b.ops != 1 {
		t.Fatalf("two stores: a %d batches %d ops, b %d batches %d ops; want a 2/5, b 1/1", a.batches, a.ops, b.batches, b.ops)
	}

	b.inner, b.err = memstore.New(), nil
	b.batches, b.ops = 0, 0
	_, _ = sluice.AllowEach(ctx, []sluice.Check{{Limiter: lb, Key: "j", Cost: 1}})
	lb2, _ := sluice.New(b, sluice.FixedWindow{Limit: 5, Window: time.Hour}, sluice.WithName("b2"), sluice.WithFailMode(sluice.FailClosed))
	b.err = errors.New("down")
	d, err = sluice.AllowEach(ctx, []sluice.Check{{Limiter: lb, Key: "j", Cost: 1}, {Limiter: lb2, Key: "j", Cost: 1}})
	if err != nil || d.Results[0].Allowed || !d.Results[0].Degraded || d.Results[1].Allowed || !d.Results[1].Degraded {
		t.Fatalf("one store down: %+v %v, want both refused as degraded", d, err)
	}
}
