package sluice_test

import (
	"context"
	"errors"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/refmodel"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestWarningEdge: with a limit of 10 and WithWarning(80), the 8th unit
// (80% used) is the first that warns, every later allowed one warns, and
// the refusal does not.
func TestWarningEdge(t *testing.T) {
	clock := sluicetest.NewClock()
	l, err := sluice.New(memstore.New(), sluice.FixedWindow{Limit: 10, Window: time.Minute},
		sluice.WithWarning(80), sluice.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 1; i <= 11; i++ {
		res, err := l.Allow(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if want := i >= 8 && i <= 10; res.Warning != want {
			t.Fatalf("request %d: Warning %v, want %v (%+v)", i, res.Warning, want, res)
		}
		if res.Allowed != (i <= 10) {
			t.Fatalf("request %d: Allowed %v", i, res.Allowed)
		}
	}
	if l.WarningPercent() != 80 {
		t.Fatalf("WarningPercent %d", l.WarningPercent())
	}
}

// TestWarningRefused: New refuses a percent out of 1 to 99, naming the
// option.
func TestWarningRefused(t *testing.T) {
	for _, pct := range []int{-1, 0, 100, 250} {
		_, err := sluice.New(memstore.New(), sluice.FixedWindow{Limit: 10, Window: time.Minute}, sluice.WithWarning(pct))
		var pe *sluice.PolicyError
		if !errors.Is(err, sluice.ErrInvalidPolicy) || !errors.As(err, &pe) || pe.Field != "WithWarning" {
			t.Fatalf("WithWarning(%d): %v, want an ErrInvalidPolicy naming WithWarning", pct, err)
		}
	}
}

// TestWarningShadowDegraded: a shadowed refusal never warns; a degraded
// decision never does either.
func TestWarningShadowDegraded(t *testing.T) {
	ctx := context.Background()
	l, err := sluice.New(memstore.New(), sluice.FixedWindow{Limit: 1, Window: time.Minute}, sluice.WithWarning(50), sluice.WithShadow(true))
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := l.Allow(ctx, "k"); !res.Warning {
		t.Fatalf("first: %+v, want a warning (all used)", res)
	}
	if res, _ := l.Allow(ctx, "k"); !res.Shadowed || res.Warning {
		t.Fatalf("second: %+v, want shadowed without warning", res)
	}
	d, err := sluice.New(brokenStore{}, sluice.FixedWindow{Limit: 1, Window: time.Minute}, sluice.WithWarning(1))
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := d.Allow(ctx, "k"); !res.Degraded || res.Warning {
		t.Fatalf("degraded: %+v, want no warning", res)
	}
}

// refWarns is the warning's reference: allowed, and used/limit ≥
// percent/100 in exact rationals.
func refWarns(allowed bool, limit, remaining int64, pct int) bool {
	if !allowed {
		return false
	}
	used := big.NewRat(limit-remaining, limit)
	return used.Cmp(big.NewRat(int64(pct), 100)) >= 0
}

// TestWarningProperty: on random timelines of every algorithm, each
// decision's Warning is the reference's, from the reference model's
// Remaining.
func TestWarningProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(30, 2))
	ctx := context.Background()
	for run := range 60 {
		limit := 1 + rng.Int64N(40)
		window := time.Duration(1000+rng.Int64N(900_000)) * time.Microsecond
		var pol sluice.Policy
		switch run % 5 {
		case 0:
			pol = sluice.FixedWindow{Limit: limit, Window: window}
		case 1:
			pol = sluice.SlidingLog{Limit: limit, Window: window}
		case 2:
			pol = sluice.SlidingWindow{Limit: limit, Window: window}
		case 3:
			pol = sluice.TokenBucket{Capacity: limit, Rate: float64(1 + rng.IntN(20)), Per: window}
		default:
			pol = sluice.GCRA{Burst: limit, Rate: float64(1 + rng.IntN(20)), Per: window}
		}
		pct := 1 + rng.IntN(99)
		clock := sluicetest.NewClock()
		l, err := sluice.New(memstore.New(), pol, sluice.WithWarning(pct), sluice.WithClock(clock.Now), sluice.WithDenyCache(false))
		if err != nil {
			t.Fatal(err)
		}
		m := refmodel.New(l.Rule())
		for step := range 200 {
			clock.Advance(time.Duration(rng.Int64N(int64(window)/4000+1)) * time.Microsecond)
			cost := rng.Int64N(min(limit, 3) + 1)
			want, _ := m.Decide("k", clock.Now().UnixMicro(), cost)
			got, err := l.AllowN(ctx, "k", cost)
			if err != nil {
				t.Fatal(err)
			}
			if got.Allowed != want.Allowed || got.Remaining != want.Remaining {
				t.Fatalf("run %d step %d: store %+v, model %+v", run, step, got, want)
			}
			if w := refWarns(want.Allowed, limit, want.Remaining, pct); got.Warning != w {
				t.Fatalf("run %d step %d (%v, %d%%, cost %d): Warning %v, reference %v (%+v)",
					run, step, l.Rule(), pct, cost, got.Warning, w, got)
			}
		}
	}
}
