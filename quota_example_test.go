package sluice_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// A daily quota whose day ends at midnight in Los Angeles, on the day the
// clocks spring forward (23 hours long). The clock is a fake one.
func Example_dailyQuota() {
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		panic(err)
	}
	daily := sluice.FixedWindow{Limit: 2, Calendar: sluice.Calendar{Unit: sluice.Day, Zone: la}}
	clock := sluicetest.NewClockAt(time.Date(2026, 3, 8, 9, 0, 0, 0, la))
	limiter, err := sluice.New(memstore.New(), daily, sluice.WithClock(clock.Now))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 3 {
		res, err := limiter.Allow(ctx, "acme")
		if err != nil {
			panic(err)
		}
		fmt.Println(res.Allowed, res.Remaining, "renews", clock.Now().Add(res.ResetAfter).In(la))
	}
	start, end := limiter.Rule().Span(clock.Now())
	fmt.Println("this day lasts", end.Sub(start))
	// Output:
	// true 1 renews 2026-03-09 00:00:00 -0700 PDT
	// true 0 renews 2026-03-09 00:00:00 -0700 PDT
	// false 0 renews 2026-03-09 00:00:00 -0700 PDT
	// this day lasts 23h0m0s
}

// Plans: a key that moves from the free plan to pro keeps what it took,
// and the new limit applies at once.
func Example_planChange() {
	hourly := sluice.FixedWindow{Limit: 1000, Window: time.Hour}
	pro := sluice.FixedWindow{Limit: 50000, Window: time.Hour}
	limiter, err := sluice.New(memstore.New(), hourly, sluice.WithPlan("pro", pro))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	res, err := limiter.AllowN(ctx, "acme", 1000) // the free plan: the policy's limit
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Allowed, res.Remaining, res.Source)
	res, err = limiter.AllowPlan(ctx, "acme", "pro", 1) // upgraded mid-hour
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Allowed, res.Remaining, res.Source)
	_, err = limiter.AllowPlan(ctx, "acme", "gold", 1)
	fmt.Println(err)
	// Output:
	// true 0 policy
	// true 48999 plan
	// sluice: invalid policy: unknown plan "gold" of fw-1000-3600000000 (it has [pro])
}

// An override: this customer gets double until Friday while they migrate,
// then the policy's limit applies again to the same count. The clock is a
// fake one.
func Example_expiringOverride() {
	clock := sluicetest.NewClockAt(time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)) // a Monday
	weekly := sluice.FixedWindow{Limit: 100, Calendar: sluice.Calendar{Unit: sluice.Week, Zone: time.UTC}}
	limiter, err := sluice.New(memstore.New(), weekly, sluice.WithOverrides(true), sluice.WithClock(clock.Now))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	friday := time.Date(2026, 3, 6, 0, 0, 0, 0, time.UTC)
	err = limiter.SetOverride(ctx, "acme", sluice.Override{Limit: 200, Expires: friday, Reason: "migration", Actor: "ops@example.com"})
	if err != nil {
		panic(err)
	}
	res, err := limiter.AllowN(ctx, "acme", 150)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Allowed, res.Limit, res.Remaining, res.Source)
	clock.SetTime(friday) // Friday: the override has lapsed
	res, err = limiter.Allow(ctx, "acme")
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Allowed, res.Limit, res.Remaining, res.Source)
	// Output:
	// true 200 50 override
	// false 100 0 policy
}
