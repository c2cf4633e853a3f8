package sluicetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"

	"github.com/sluicehq/sluice/driver"

	"github.com/sluicehq/sluice/internal/ruleview"
)

// RunPlans checks plans on h.Store: a key that moves to another plan keeps
// what it took, the new limit applies at once, Result.Source says which
// limit decided, and an unknown plan is an error.
func RunPlans(t *testing.T, h Harness) {
	ctx := context.Background()
	clock := NewClock()
	l := h.NewLimiter(t, sluice.FixedWindow{Limit: 5, Window: time.Minute}, sluice.WithClock(clock.Now),
		sluice.WithPlan("pro", sluice.FixedWindow{Limit: 10, Window: time.Minute}))
	step := func(plan string, n int64, want sluice.Result) {
		t.Helper()
		res, err := l.AllowPlan(ctx, "k", plan, n)
		if err != nil || res != want {
			t.Fatalf("plan %q cost %d:\n got %+v %v\nwant %+v", plan, n, res, err, want)
		}
	}
	step("", 4, sluice.Result{Allowed: true, Limit: 5, Remaining: 1, ResetAfter: time.Minute})
	// Upgraded mid-window: the 4 taken count against the new limit.
	step("pro", 1, sluice.Result{Allowed: true, Limit: 10, Remaining: 5, ResetAfter: time.Minute, Source: sluice.SourcePlan})
	step("pro", 5, sluice.Result{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: time.Minute, Source: sluice.SourcePlan})
	// Downgraded: 10 taken, over the policy's 5.
	step("", 1, sluice.Result{Limit: 5, Remaining: 0, RetryAfter: time.Minute, ResetAfter: time.Minute})
	if _, err := l.AllowPlan(ctx, "k", "gold", 1); !errors.Is(err, sluice.ErrUnknownPlan) {
		t.Fatalf("unknown plan: %v, want ErrUnknownPlan", err)
	}
	for _, bad := range []sluice.Option{
		sluice.WithPlan("pro", sluice.GCRA{Rate: 1, Per: time.Second, Burst: 5}),
		sluice.WithPlan("pro", sluice.FixedWindow{Limit: 10, Window: time.Hour}),
		sluice.WithPlan("bad name", sluice.FixedWindow{Limit: 10, Window: time.Minute}),
	} {
		if _, err := sluice.New(h.Store, sluice.FixedWindow{Limit: 5, Window: time.Minute}, bad); !errors.Is(err, sluice.ErrInvalidPolicy) {
			t.Errorf("a plan that cannot share the policy's state: %v, want ErrInvalidPolicy", err)
		}
	}
}

// RunOverrides checks key overrides on h.Store, which must implement
// driver.OverrideStore (a store that does not must make New refuse
// WithOverrides): an override applies to the key's existing state, takes
// precedence over the plan, lapses by itself at its expiry, and can be
// read, listed and deleted; bad overrides are refused.
func RunOverrides(t *testing.T, h Harness) {
	ctx := context.Background()
	clock := NewClock()
	policy := sluice.FixedWindow{Limit: 2, Window: time.Hour}
	opts := []sluice.Option{sluice.WithPrefix(Prefix(t)), sluice.WithTimeout(5 * time.Second), sluice.WithClock(clock.Now),
		sluice.WithOverrides(true), sluice.WithPlan("pro", sluice.FixedWindow{Limit: 4, Window: time.Hour})}
	l, err := sluice.New(h.Store, policy, opts...)
	if _, ok := h.Store.(driver.OverrideStore); !ok {
		if err == nil {
			t.Fatal("WithOverrides accepted by a store that keeps no overrides")
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	overrideLifecycle(t, ctx, l, clock)
	overrideBelowCost(t, ctx, l, clock)
	overrideWindow(t, ctx, l, clock)
	badOverrides(t, ctx, l, clock)
	rateOverride(t, ctx, h.Store, opts[:4], clock)
}

// overrideLifecycle: an override applies to the key's existing state,
// takes precedence over the plan, is read and listed, lapses at its
// expiry, and is deleted.
func overrideLifecycle(t *testing.T, ctx context.Context, l *sluice.Limiter, clock *Clock) {
	step := func(what, plan string, n int64, want sluice.Result) {
		t.Helper()
		res, err := l.AllowPlan(ctx, "k", plan, n)
		if err != nil || res != want {
			t.Fatalf("%s:\n got %+v %v\nwant %+v", what, res, err, want)
		}
	}
	hour := time.Hour
	step("policy", "", 1, sluice.Result{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: hour})
	expires := clock.Now().Add(10 * time.Minute)
	if err := l.SetOverride(ctx, "k", sluice.Override{Limit: 6, Expires: expires, Reason: "migration", Actor: "ops"}); err != nil {
		t.Fatal(err)
	}
	// The override applies to what the key took before it.
	step("override", "", 3, sluice.Result{Allowed: true, Limit: 6, Remaining: 2, ResetAfter: hour, Source: sluice.SourceOverride, OverrideParam: hour.Microseconds()})
	// It takes precedence over the plan.
	step("override over plan", "pro", 1, sluice.Result{Allowed: true, Limit: 6, Remaining: 1, ResetAfter: hour, Source: sluice.SourceOverride, OverrideParam: hour.Microseconds()})
	overrideReadAndListed(t, ctx, l, clock, expires)
	// The last microsecond of the override, then its lapse: the policy's
	// limit applies to the same count (5 taken).
	clock.Set(10*time.Minute - time.Microsecond)
	step("override's last microsecond", "", 0, sluice.Result{Allowed: true, Limit: 6, Remaining: 1, ResetAfter: hour - 10*time.Minute + time.Microsecond, Source: sluice.SourceOverride, OverrideParam: hour.Microseconds()})
	clock.Set(10 * time.Minute)
	step("lapsed", "", 1, sluice.Result{Limit: 2, RetryAfter: 50 * time.Minute, ResetAfter: 50 * time.Minute})
	step("lapsed, plan", "pro", 1, sluice.Result{Limit: 4, RetryAfter: 50 * time.Minute, ResetAfter: 50 * time.Minute, Source: sluice.SourcePlan})
	// Delete: the plan applies again at once.
	overrideDeleted(t, ctx, l, "other")
}

// overrideReadAndListed checks that GetOverride reads back the override
// overrideLifecycle set on "k" (limit 6 until expires, with its reason,
// actor and setting time), then sets a second one on "other" and checks
// that Overrides lists both in key order.
func overrideReadAndListed(t *testing.T, ctx context.Context, l *sluice.Limiter, clock *Clock, expires time.Time) {
	overrideReadBack(t, ctx, l, clock, expires)
	if err := l.SetOverride(ctx, "other", sluice.Override{Limit: 9, Expires: expires.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	list, err := l.Overrides(ctx)
	if err != nil || len(list) != 2 || list[0].Key != "k" || list[1].Key != "other" || list[1].Limit != 9 {
		t.Fatalf("Overrides: %+v %v", list, err)
	}
}

// overrideReadBack checks that GetOverride returns every field of the
// override set on "k": limit 6 until expires, its reason and actor, and
// the limiter's time when it was set.
func overrideReadBack(t *testing.T, ctx context.Context, l *sluice.Limiter, clock *Clock, expires time.Time) {
	o, ok, err := l.GetOverride(ctx, "k")
	if err != nil || !ok || o.Limit != 6 || !o.Expires.Equal(expires) || o.Reason != "migration" || o.Actor != "ops" || !o.Set.Equal(clock.Now()) {
		t.Fatalf("GetOverride: %+v %v %v", o, ok, err)
	}
}

// overrideDeleted deletes the override on key and checks it is gone.
func overrideDeleted(t *testing.T, ctx context.Context, l *sluice.Limiter, key string) {
	if err := l.DeleteOverride(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := l.GetOverride(ctx, key); ok || err != nil {
		t.Fatalf("deleted override still there: %v %v", ok, err)
	}
}

// overrideBelowCost: an override below a cost the plan admits refuses it,
// taking nothing, until it lapses.
func overrideBelowCost(t *testing.T, ctx context.Context, l *sluice.Limiter, clock *Clock) {
	hour := time.Hour
	if err := l.SetOverride(ctx, "big", sluice.Override{Limit: 1, Expires: clock.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	res, err := l.AllowPlan(ctx, "big", "pro", 3)
	if err != nil || res != (sluice.Result{Limit: 1, Remaining: 1, RetryAfter: time.Minute, Source: sluice.SourceOverride, OverrideParam: hour.Microseconds()}) {
		t.Fatalf("cost over the override's limit: %+v %v", res, err)
	}
}

// overrideWindow: an override with its own window.
func overrideWindow(t *testing.T, ctx context.Context, l *sluice.Limiter, clock *Clock) {
	// An override with its own window: the Result carries the window it
	// decided with, and InForce gives the rule in force (what headers and
	// reports show).
	if err := l.SetOverride(ctx, "win", sluice.Override{Limit: 3, Window: 10 * time.Minute, Expires: clock.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	res, err := l.AllowPlan(ctx, "win", "pro", 1)
	if err != nil || res.Source != sluice.SourceOverride || res.Limit != 3 || res.OverrideParam != (10*time.Minute).Microseconds() {
		t.Fatalf("override with a window: %+v %v, want limit 3 and parameter 600000000µs", res, err)
	}
	pro, _ := l.PlanRule("pro")
	if in := ruleview.InForce(pro, res); in.Limit != 3 || in.Window != 10*time.Minute || in.Algorithm != pro.Algorithm {
		t.Fatalf("InForce of an override with a window: %+v, want limit 3 per 10m", in)
	}
}

// badOverrides: bad overrides are refused with the field named.
func badOverrides(t *testing.T, ctx context.Context, l *sluice.Limiter, clock *Clock) {
	for _, tc := range []struct {
		o    sluice.Override
		want string
	}{
		{sluice.Override{Expires: clock.Now().Add(time.Hour)}, "limit must be positive"},
		{sluice.Override{Limit: 3}, "expires is required"},
		{sluice.Override{Limit: 3, Expires: clock.Now()}, "is not after now"},
		{sluice.Override{Limit: 3, Expires: clock.Now().Add(time.Hour), Rate: 5, Per: time.Second}, "rate is not for"},
		{sluice.Override{Limit: 3, Expires: clock.Now().Add(time.Hour), Window: time.Nanosecond}, "window must be at least"},
	} {
		err := l.SetOverride(ctx, "k", tc.o)
		if !errors.Is(err, sluice.ErrInvalidOverride) || !contains(err.Error(), tc.want) {
			t.Errorf("SetOverride(%+v) = %v, want %q", tc.o, err, tc.want)
		}
	}
}

// rateOverride: a rate override of a token bucket: its interval applies.
func rateOverride(t *testing.T, ctx context.Context, store driver.Store, opts []sluice.Option, clock *Clock) {
	tb, err := sluice.New(store, sluice.TokenBucket{Capacity: 2, Rate: 1, Per: time.Second}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.SetOverride(ctx, "k", sluice.Override{Limit: 4, Rate: 4, Per: time.Second, Expires: clock.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	res, err := tb.AllowN(ctx, "k", 4)
	if err != nil || !res.Allowed || res.Limit != 4 || res.Source != sluice.SourceOverride || res.ResetAfter != time.Second ||
		res.OverrideParam != 250_000 {
		t.Fatalf("token bucket with a rate override: %+v %v, want 4 taken, full again after 1s (4/s: an interval of 250000µs)", res, err)
	}
	if in := ruleview.InForce(tb.Rule(), res); in.Interval != 250*time.Millisecond || in.Limit != 4 || in.Period() != time.Second {
		t.Fatalf("InForce of a rate override: %+v, want 4 per 1s", in)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// RunDifferentialOverrides runs random operations with plans (rules of
// other limits and rates on the same keys) and key overrides that are set,
// deleted and lapse mid-timeline, on memstore and on h.Store, which must
// implement driver.OverrideStore: every Result, its Source and Limit
// included, must be identical.
func RunDifferentialOverrides(t *testing.T, h Harness) {
	ovs, ok := h.Store.(driver.OverrideStore)
	if !ok {
		t.Fatalf("%T does not implement driver.OverrideStore", h.Store)
	}
	d := NewDiffer(t, h.Store)
	ctx := context.Background()
	prefix := Prefix(t)
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 13))
		base := RandomRule(rng, int(seed%5))
		plans := randomPlans(rng, base)
		name := fmt.Sprintf("o%d", seed)
		now := Epoch.Add(time.Duration(rng.IntN(1e6)) * time.Microsecond)
		w := base.Period()
		for i := range 120 {
			id := fmt.Sprint(rng.IntN(2))
			key := driver.Key(prefix, name, base, id)
			ovKey := driver.OverrideKey(prefix, name, id)
			stores := []driver.OverrideStore{d.mem, ovs}
			randomOverrideChange(t, ctx, rng, stores, driver.OverrideIndex(prefix, name), ovKey, id, now, w)
			now = randomAdvance(rng, now, w)
			rule := plans[rng.IntN(len(plans))]
			cost := int64(rng.IntN(int(rule.Limit) + 1))
			d.Step(fmt.Sprintf("seed %d op %d (%v, cost %d, at +%v)", seed, i, rule, cost, now.Sub(Epoch)),
				driver.Op{Key: key, Rule: rule, Cost: cost, Now: now, Override: ovKey})
		}
	}
}

// randomOverrideChange, one time in twelve, sets an override of identity
// id (at ovKey under index) on every store, lapsing within two windows w
// of now and sometimes with a parameter that may be out of bounds; one
// time in twelve it deletes it; otherwise it leaves the overrides alone.
func randomOverrideChange(t *testing.T, ctx context.Context, rng *rand.Rand, stores []driver.OverrideStore, index, ovKey, id string, now time.Time, w time.Duration) {
	switch rng.IntN(12) {
	case 0: // set an override on both stores, lapsing within a few windows
		rec := driver.OverrideRecord{Identity: id, Limit: int64(1 + rng.IntN(12)),
			Expires: now.Add(time.Duration(rng.Int64N(int64(2*w)/1000+1)) * time.Microsecond)}
		if rng.IntN(3) == 0 {
			rec.Param = int64(rng.IntN(3_000_000)) // maybe out of bounds: then ignored
		}
		for _, s := range stores {
			if err := s.PutOverride(ctx, index, ovKey, rec); err != nil {
				t.Fatal(err)
			}
		}
	case 1:
		for _, s := range stores {
			if err := s.DeleteOverride(ctx, index, ovKey, id); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// randomAdvance moves now on by a microsecond one time in four, and
// otherwise by up to one and a half windows w.
func randomAdvance(rng *rand.Rand, now time.Time, w time.Duration) time.Time {
	if rng.IntN(4) == 0 {
		return now.Add(time.Microsecond)
	}
	return now.Add(time.Duration(rng.Int64N(int64(w)*3/2/1000+1)) * time.Microsecond)
}

// randomPlans returns base and up to two plans of it: the same state,
// another limit (and interval for rates).
func randomPlans(rng *rand.Rand, base sluice.Rule) []sluice.Rule {
	plans := []sluice.Rule{base}
	for range 2 {
		p, err := base.Overridden(int64(1+rng.IntN(12)), 0)
		if base.Algorithm.Rated() && rng.IntN(2) == 0 {
			p, err = base.Overridden(int64(1+rng.IntN(12)), int64(1+rng.IntN(400_000)))
		}
		if err == nil && p.Algorithm != driver.AlgorithmSlidingLog || err == nil && p.Limit <= driver.MaxSlidingLogLimit {
			plans = append(plans, p)
		}
	}
	return plans
}
