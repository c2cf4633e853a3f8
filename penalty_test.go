package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// penalized is a limiter of one request in 100 days (every later request is
// refused) that blocks after 3 refusals within 10s: 1 minute, doubling up
// to 4, forgiven after an hour without a block.
func penalized(t *testing.T, opts ...sluice.Option) (*sluice.Limiter, *sluicetest.Clock) {
	t.Helper()
	clock := sluicetest.NewClock()
	st := memstore.New(memstore.WithClock(clock.Now))
	pen := sluice.Penalty{After: 3, Within: 10 * time.Second, Block: time.Minute, MaxBlock: 4 * time.Minute, Forgive: time.Hour}
	l, err := sluice.New(st, sluice.FixedWindow{Limit: 1, Window: 100 * 24 * time.Hour}, append([]sluice.Option{sluice.WithClock(clock.Now), sluice.WithPenalty(pen)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l, clock
}

// decide is one request of key, which must be answered as want says:
// "allowed", "refused", "blocked" (for retry) or "started" (a block of
// retry starts).
func decide(t *testing.T, l *sluice.Limiter, key, want string, retry time.Duration) sluice.Result {
	t.Helper()
	res, err := l.Allow(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	got := "refused"
	switch {
	case res.Allowed:
		got = "allowed"
	case res.BlockStarted:
		got = "started"
	case res.Blocked:
		got = "blocked"
	}
	if got != want || (res.Blocked && (res.RetryAfter != retry || res.ResetAfter != retry || res.Remaining != 0)) {
		t.Fatalf("got %s %+v, want %s for %v", got, res, want, retry)
	}
	return res
}

// offend makes the 3 refusals that start a block of d.
func offend(t *testing.T, l *sluice.Limiter, key string, d time.Duration) {
	t.Helper()
	decide(t, l, key, "refused", 0)
	decide(t, l, key, "refused", 0)
	decide(t, l, key, "started", d)
}

// TestPenaltyBlockEdge: the After-th refusal starts the block, and not
// the one before; the block refuses until its last microsecond, and at
// its end the policy decides again.
func TestPenaltyBlockEdge(t *testing.T) {
	l, clock := penalized(t)
	decide(t, l, "a", "allowed", 0)
	offend(t, l, "a", time.Minute)
	clock.Advance(time.Minute - time.Microsecond)
	decide(t, l, "a", "blocked", time.Microsecond)
	clock.Advance(time.Microsecond)
	decide(t, l, "a", "refused", 0) // the policy's own refusal: the window lasts 100 days
	// The window of refusals: 10s from its first one. Two refusals in
	// it, then a third at its end, open a new one: no block.
	clock.Advance(10*time.Second - time.Microsecond)
	decide(t, l, "a", "refused", 0)
	clock.Advance(time.Microsecond)
	decide(t, l, "a", "refused", 0)
	decide(t, l, "a", "refused", 0)
	decide(t, l, "a", "started", 2*time.Minute)
	// Refusals during a block do not extend it.
	clock.Advance(time.Minute)
	decide(t, l, "a", "blocked", time.Minute)
	// Another key is not blocked.
	decide(t, l, "b", "allowed", 0)
}

// TestPenaltyEscalation: each block while remembered doubles the last,
// up to MaxBlock.
func TestPenaltyEscalation(t *testing.T) {
	l, clock := penalized(t)
	decide(t, l, "a", "allowed", 0)
	for _, d := range []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 4 * time.Minute} {
		offend(t, l, "a", d)
		clock.Advance(d)
	}
}

// TestPenaltyForgiveness: the escalation is remembered until exactly
// Forgive after the last block ended: a block a microsecond before then
// doubles, one at then is Block again.
func TestPenaltyForgiveness(t *testing.T) {
	for _, tc := range []struct {
		wait time.Duration
		want time.Duration
	}{{time.Hour - time.Microsecond, 2 * time.Minute}, {time.Hour, time.Minute}} {
		t.Run(fmt.Sprint(tc.wait), func(t *testing.T) {
			l, clock := penalized(t)
			decide(t, l, "a", "allowed", 0)
			// The block's 3 refusals, 2 of them before the wait: the block
			// starts at the third.
			decide(t, l, "a", "refused", 0)
			decide(t, l, "a", "refused", 0)
			decide(t, l, "a", "started", time.Minute)
			clock.Advance(time.Minute + tc.wait - 2*time.Microsecond)
			decide(t, l, "a", "refused", 0)
			clock.Advance(time.Microsecond)
			decide(t, l, "a", "refused", 0)
			clock.Advance(time.Microsecond)
			decide(t, l, "a", "started", tc.want)
		})
	}
}

// TestPenaltyReset: Reset lifts a block and forgets the escalation, and
// the deny cache stops refusing at once.
func TestPenaltyReset(t *testing.T) {
	var cached atomic.Int64
	obs := observerFunc(func(o sluice.Observation) {
		if o.Answer == sluice.AnswerDenyCache {
			cached.Add(1)
		}
	})
	l, clock := penalized(t, sluice.WithObserver(obs))
	decide(t, l, "a", "allowed", 0)
	offend(t, l, "a", time.Minute)
	clock.Advance(time.Minute)
	offend(t, l, "a", 2*time.Minute)
	decide(t, l, "a", "blocked", 2*time.Minute) // from the deny cache
	if cached.Load() != 1 {
		t.Fatalf("%d answers of the deny cache, want 1", cached.Load())
	}
	if err := l.Reset(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	decide(t, l, "a", "allowed", 0)
	offend(t, l, "a", time.Minute) // Block again: the escalation is forgotten
}

// TestPenaltyDenyCache: a blocked refusal is answered by the deny cache
// until the block's end, and not after; other refusals reach the store,
// which counts them.
func TestPenaltyDenyCache(t *testing.T) {
	var cached atomic.Int64
	obs := observerFunc(func(o sluice.Observation) {
		if o.Answer == sluice.AnswerDenyCache {
			cached.Add(1)
		}
	})
	l, clock := penalized(t, sluice.WithObserver(obs), sluice.WithDenyCache(true))
	decide(t, l, "a", "allowed", 0)
	offend(t, l, "a", time.Minute) // three refusals reached the store
	if cached.Load() != 0 {
		t.Fatalf("%d answers of the deny cache before the block, want 0", cached.Load())
	}
	clock.Advance(time.Minute - time.Microsecond)
	decide(t, l, "a", "blocked", time.Microsecond)
	if cached.Load() != 1 {
		t.Fatalf("%d answers of the deny cache during the block, want 1", cached.Load())
	}
	clock.Advance(time.Microsecond)
	decide(t, l, "a", "refused", 0)
	if cached.Load() != 1 {
		t.Fatalf("the deny cache answered after the block's end")
	}
}

// TestPenaltyShadow: in shadow mode a block is reported, not enforced.
func TestPenaltyShadow(t *testing.T) {
	l, _ := penalized(t, sluice.WithShadow(true))
	ctx := context.Background()
	for i := range 4 {
		res, err := l.Allow(ctx, "a")
		if err != nil || !res.Allowed || (i == 3) != res.BlockStarted || (i == 3) != res.Blocked {
			t.Fatalf("request %d: %+v %v", i, res, err)
		}
	}
}

// notPenalizer is a store that does not decide penalties.
type notPenalizer struct{ driver.Store }

// TestPenaltyRefused: New refuses a penalty it cannot enforce, naming
// the field.
func TestPenaltyRefused(t *testing.T) {
	good := sluice.Penalty{After: 5, Within: time.Minute, Block: time.Minute, MaxBlock: 16 * time.Minute, Forgive: 24 * time.Hour}
	with := func(f func(p *sluice.Penalty)) sluice.Penalty { p := good; f(&p); return p }
	st := memstore.New()
	fw := sluice.FixedWindow{Limit: 5, Window: time.Minute}
	for _, tc := range []struct {
		field string
		store driver.Store
		pol   sluice.Policy
		opts  []sluice.Option
	}{
		{"Penalty.After", st, fw, []sluice.Option{sluice.WithPenalty(with(func(p *sluice.Penalty) { p.After = 0 }))}},
		{"Penalty.Within", st, fw, []sluice.Option{sluice.WithPenalty(with(func(p *sluice.Penalty) { p.Within = 0 }))}},
		{"Penalty.Block", st, fw, []sluice.Option{sluice.WithPenalty(with(func(p *sluice.Penalty) { p.Block = time.Microsecond }))}},
		{"Penalty.MaxBlock", st, fw, []sluice.Option{sluice.WithPenalty(with(func(p *sluice.Penalty) { p.MaxBlock = time.Second }))}},
		{"Penalty.MaxBlock", st, fw, []sluice.Option{sluice.WithPenalty(with(func(p *sluice.Penalty) { p.MaxBlock = 500 * 24 * time.Hour }))}},
		{"Penalty.Forgive", st, fw, []sluice.Option{sluice.WithPenalty(with(func(p *sluice.Penalty) { p.Forgive = 0 }))}},
		{"Penalty.Forgive", st, fw, []sluice.Option{sluice.WithPenalty(with(func(p *sluice.Penalty) { p.MaxBlock = 0 }))}},
		{"WithPenalty", st, sluice.InFlight{Limit: 5, Lease: time.Minute}, []sluice.Option{sluice.WithPenalty(good)}},
		{"WithPenalty", st, fw, []sluice.Option{sluice.WithPenalty(good), sluice.WithReservations(sluice.ReserveOptions{})}},
		{"WithPenalty", notPenalizer{st}, fw, []sluice.Option{sluice.WithPenalty(good)}},
	} {
		_, err := sluice.New(tc.store, tc.pol, tc.opts...)
		var pe *sluice.PolicyError
		if !errors.As(err, &pe) || pe.Field != tc.field || !errors.Is(err, sluice.ErrInvalidPolicy) {
			t.Errorf("%s: got %v (%+v), want an error naming %s", tc.field, err, pe, tc.field)
		}
	}
	// Without growth, a penalty needs no Forgive.
	if _, err := sluice.New(st, fw, sluice.WithPenalty(sluice.Penalty{After: 1, Within: time.Second, Block: time.Second})); err != nil {
		t.Fatal(err)
	}
}

// observerFunc is a ContextObserver of a function.
type observerFunc func(sluice.Observation)

func (f observerFunc) ObserveDecision(string, sluice.Result, error, time.Duration) {}
func (f observerFunc) ObserveContext(_ context.Context, o sluice.Observation)      { f(o) }
