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
	"github.com/sluicehq/sluice/memstore"
)

// RunClocks checks the times a store keeps, on h.Store and on memstore
// alike: a decision at a time outside MinTime to MaxTime (before 1970, the
// Unix epoch itself, which must not be taken for "the store's clock", or
// past MaxTime) is refused with ErrInvalidTime by the store and by the
// limiter, never decided by the fail mode; decisions at MinTime and
// MaxTime are decided the same by both stores; and overrides follow the
// limiter's clock, not the host's: one set under a clock in the past lives
// as long as that clock says, and one the limiter's clock has seen lapse
// is not returned, while its expiry is kept to the microsecond by both.
func RunClocks(t *testing.T, h Harness) {
	t.Run("Range", func(t *testing.T) { runTimeRange(t, h) })
	t.Run("LimiterClock", func(t *testing.T) { runLimiterClockRange(t, h) })
	if _, ok := h.Store.(driver.OverrideStore); ok {
		t.Run("OverrideClock", func(t *testing.T) { runOverrideClock(t, h) })
	}
}

func runTimeRange(t *testing.T, h Harness) {
	ctx := context.Background()
	prefix := Prefix(t)
	mem := memstore.New()
	for _, at := range []time.Time{time.Unix(-1, 0), time.Unix(0, 0), time.Unix(0, 999), time.Date(1969, 7, 20, 20, 17, 0, 0, time.UTC), driver.MaxTime.Add(time.Microsecond)} {
		for _, st := range []driver.Store{mem, h.Store} {
			for alg := range 5 {
				r := RandomRule(rand.New(rand.NewPCG(uint64(alg), 1)), alg)
				ops := []driver.Op{{Key: driver.Key(prefix, "range", r, "k"), Rule: r, Cost: 1, Now: at}}
				if err := st.Do(ctx, ops); err != nil {
					t.Fatalf("%T at %v: %v", st, at, err)
				}
				if !errors.Is(ops[0].Err, sluice.ErrInvalidTime) {
					t.Fatalf("%T, %v at %v: %+v, err %v; want ErrInvalidTime", st, r, at.UTC(), ops[0].Result, ops[0].Err)
				}
			}
		}
	}
	d := NewDiffer(t, h.Store)
	for i, at := range []time.Time{driver.MinTime, driver.MinTime.Add(time.Hour), driver.MaxTime.Add(-time.Hour), driver.MaxTime} {
		for alg := range 5 {
			r := RandomRule(rand.New(rand.NewPCG(uint64(alg), 2)), alg)
			key := driver.Key(prefix, fmt.Sprintf("edge%d", i), r, "k")
			d.Step(fmt.Sprintf("%v at %v", r, at.UTC()), driver.Op{Key: key, Rule: r, Cost: 1, Now: at})
			d.Step(fmt.Sprintf("%v at %v, again", r, at.UTC()), driver.Op{Key: key, Rule: r, Cost: 1, Now: at})
		}
	}
}

func runLimiterClockRange(t *testing.T, h Harness) {
	ctx := context.Background()
	for _, at := range []time.Time{time.Unix(0, 0), time.Unix(-86400, 0), driver.MaxTime.Add(time.Second)} {
		l := h.NewLimiter(t, sluice.FixedWindow{Limit: 5, Window: time.Minute}, sluice.WithClock(func() time.Time { return at }))
		res, err := l.Allow(ctx, "k")
		if !errors.Is(err, sluice.ErrInvalidTime) || res.Degraded {
			t.Fatalf("limiter clock at %v: %+v, %v; want ErrInvalidTime and no decision", at.UTC(), res, err)
		}
	}
}

func runOverrideClock(t *testing.T, h Harness) {
	ctx := context.Background()
	ovs := h.Store.(driver.OverrideStore)
	// The limiter's clock is in the past of every host that runs this, and
	// another one in the future.
	for _, start := range []time.Time{time.Date(2010, 3, 1, 12, 0, 0, 0, time.UTC), time.Now().Add(400 * 24 * time.Hour).Truncate(time.Hour)} {
		overrideOnLimiterClock(t, h, start)
	}
	// What a store cannot keep is refused by every store, not rounded.
	mem := memstore.New()
	now := time.Now()
	for _, rec := range []driver.OverrideRecord{
		{Identity: "a", Limit: 1, Expires: now.Truncate(time.Microsecond).Add(time.Hour + time.Nanosecond)},
		{Identity: "a", Limit: 1, Expires: time.Unix(-60, 0)},
		{Identity: "a", Limit: 1, Expires: driver.MaxTime.Add(time.Microsecond)},
		{Identity: "a", Limit: 1, Expires: time.Unix(1_800_000_000, 0), Set: time.Unix(1_800_000_000, 0)},
		{Identity: "a", Limit: 1, Expires: time.Unix(1_800_000_000, 0), Set: time.Unix(0, 0)},
	} {
		for _, st := range []driver.OverrideStore{mem, ovs} {
			if err := st.PutOverride(ctx, Prefix(t)+":idx", Prefix(t)+":ov", rec); !errors.Is(err, sluice.ErrInvalidOverride) {
				t.Errorf("%T: PutOverride of expires %v, set %v: %v, want ErrInvalidOverride", st, rec.Expires, rec.Set, err)
			}
		}
	}
}

// overrideOnLimiterClock: an override set, read, listed, decided under
// and lapsed on a limiter whose clock starts at start, whatever the
// host's clock says.
func overrideOnLimiterClock(t *testing.T, h Harness, start time.Time) {
	ctx := context.Background()
	clock := NewClockAt(start)
	policy := sluice.FixedWindow{Limit: 2, Window: time.Hour}
	l, err := sluice.New(h.Store, policy, sluice.WithPrefix(Prefix(t)), sluice.WithTimeout(5*time.Second),
		sluice.WithClock(clock.Now), sluice.WithOverrides(true))
	if err != nil {
		t.Fatal(err)
	}
	// Half a microsecond past the tenth minute: kept as the tenth minute.
	if err := l.SetOverride(ctx, "k", sluice.Override{Limit: 6, Expires: start.Add(10*time.Minute + 500*time.Nanosecond)}); err != nil {
		t.Fatalf("clock at %v: SetOverride: %v", start, err)
	}
	expires := start.Add(10 * time.Minute)
	overrideHeldOnClock(t, l, start, expires)
	overrideLapsedOnClock(t, l, clock, start, expires)
}

// overrideHeldOnClock checks, on the limiter's clock at start, that the
// override just set on "k" (limit 6 until expires) is read, listed and
// decided under.
func overrideHeldOnClock(t *testing.T, l *sluice.Limiter, start, expires time.Time) {
	ctx := context.Background()
	overrideReadOnClock(t, ctx, l, start, expires)
	res, err := l.AllowN(ctx, "k", 3)
	if err != nil || res != (sluice.Result{Allowed: true, Limit: 6, Remaining: 3, ResetAfter: time.Hour, Source: sluice.SourceOverride, OverrideParam: time.Hour.Microseconds()}) {
		t.Fatalf("clock at %v: a decision under the override: %+v %v", start, res, err)
	}
}

// overrideReadOnClock checks, on the limiter's clock at start, that
// GetOverride reads the override just set on "k" (limit 6 until expires)
// and Overrides lists it.
func overrideReadOnClock(t *testing.T, ctx context.Context, l *sluice.Limiter, start, expires time.Time) {
	o, ok, err := l.GetOverride(ctx, "k")
	if err != nil || !ok || !o.Expires.Equal(expires) || o.Limit != 6 {
		t.Fatalf("clock at %v: GetOverride just after setting it: %+v %v %v, want limit 6 until %v", start, o, ok, err, expires)
	}
	if list, err := l.Overrides(ctx); err != nil || len(list) != 1 || !list[0].Expires.Equal(expires) {
		t.Fatalf("clock at %v: Overrides: %+v %v", start, list, err)
	}
}

// overrideLapsedOnClock moves the limiter's clock to the override's last
// microsecond (still held) and then to expires, where the override is
// gone from reads and lists and the policy decides again.
func overrideLapsedOnClock(t *testing.T, l *sluice.Limiter, clock *Clock, start, expires time.Time) {
	ctx := context.Background()
	clock.Set(expires.Add(-time.Microsecond).Sub(Epoch))
	if _, ok, err := l.GetOverride(ctx, "k"); !ok || err != nil {
		t.Fatalf("clock at %v: GetOverride at the override's last microsecond: %v %v", start, ok, err)
	}
	clock.Set(expires.Sub(Epoch))
	overrideGoneOnClock(t, ctx, l, start)
	res, err := l.Allow(ctx, "k")
	if err != nil || res.Source != sluice.SourcePolicy || res.Allowed {
		t.Fatalf("clock at %v: after the override's expiry: %+v %v, want the policy's refusal", start, res, err)
	}
}

// overrideGoneOnClock checks, on the limiter's clock at the override's
// expiry, that GetOverride reads no override on "k" and Overrides lists
// none.
func overrideGoneOnClock(t *testing.T, ctx context.Context, l *sluice.Limiter, start time.Time) {
	if o, ok, err := l.GetOverride(ctx, "k"); ok || err != nil {
		t.Fatalf("clock at %v: GetOverride at the override's expiry (on the limiter's clock): %+v %v %v, want none", start, o, ok, err)
	}
	if list, err := l.Overrides(ctx); err != nil || len(list) != 0 {
		t.Fatalf("clock at %v: Overrides after the expiry: %+v %v, want none", start, list, err)
	}
}
