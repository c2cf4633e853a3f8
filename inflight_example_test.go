package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// Example_inFlight: at most two exports at once per tenant. A third is
// refused until a lease is released or ends; a lease that ended cannot be
// renewed.
func Example_inFlight() {
	clock := sluicetest.NewClock() // the example's time; Valkey's clock decides by default
	ctx := context.Background()
	limiter, err := sluice.New(memstore.New(), sluice.InFlight{Limit: 2, Lease: 30 * time.Second},
		sluice.WithName("exports"), sluice.WithClock(clock.Now))
	if err != nil {
		panic(err)
	}
	lease, res, err := limiter.Acquire(ctx, "tenant:42")
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Allowed, res.Remaining)
	clock.Advance(10 * time.Second)
	second, _, _ := limiter.Acquire(ctx, "tenant:42")
	third, res, _ := limiter.Acquire(ctx, "tenant:42")
	if third == nil {
		// refused, taking nothing: RetryAfter is when the earliest lease ends at the latest
		fmt.Println(res.Allowed, res.Remaining, res.RetryAfter)
	}
	released, _ := lease.Release(ctx) // idempotent, and works after ctx ended
	fmt.Println(released)
	clock.Advance(31 * time.Second)
	err = second.Renew(ctx) // ErrLeaseLost once the lease has ended
	fmt.Println(errors.Is(err, sluice.ErrLeaseLost))
	// Output:
	// true 1
	// false 0 20s
	// true
	// true
}
