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

// A limiter of 3 requests per second per user, on the in-process store. On
// Valkey, only the store changes: valkeystore.Connect(opt).
func Example() {
	limiter, err := sluice.New(memstore.New(), sluice.GCRA{Rate: 3, Per: time.Second, Burst: 3}, sluice.WithName("api"))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := range 4 {
		res, _ := limiter.Allow(ctx, "user:42")
		fmt.Printf("request %d: allowed=%v remaining=%d\n", i+1, res.Allowed, res.Remaining)
	}
	// Output:
	// request 1: allowed=true remaining=2
	// request 2: allowed=true remaining=1
	// request 3: allowed=true remaining=0
	// request 4: allowed=false remaining=0
}

// The five algorithms on the same burst across a window edge: ten requests
// just before the edge of a one-second window, ten just after. The clock is
// a fake one, so the output is exact.
func Example_algorithms() {
	policies := []sluice.Policy{
		sluice.FixedWindow{Limit: 10, Window: time.Second},
		sluice.SlidingLog{Limit: 10, Window: time.Second},
		sluice.SlidingWindow{Limit: 10, Window: time.Second},
		sluice.TokenBucket{Capacity: 10, Rate: 10, Per: time.Second},
		sluice.GCRA{Rate: 10, Per: time.Second, Burst: 10},
	}
	ctx := context.Background()
	for _, p := range policies {
		clock := sluicetest.NewClock()
		l, _ := sluice.New(memstore.New(), p, sluice.WithClock(clock.Now))
		burst := func() (n int) {
			for range 10 {
				if res, _ := l.Allow(ctx, "client"); res.Allowed {
					n++
				}
			}
			return n
		}
		clock.Set(990 * time.Millisecond)
		before := burst()
		clock.Set(1010 * time.Millisecond)
		after := burst()
		fmt.Printf("%-14s before the edge %2d, after %2d\n", l.Rule().Algorithm, before, after)
	}
	// Output:
	// fixed_window   before the edge 10, after 10
	// sliding_log    before the edge 10, after  0
	// sliding_window before the edge 10, after  0
	// token_bucket   before the edge 10, after  0
	// gcra           before the edge 10, after  0
}

// AllowN takes several units at once; a cost above the limit could never be
// allowed and is an error, not a silent refusal.
func ExampleLimiter_AllowN() {
	l, _ := sluice.New(memstore.New(), sluice.TokenBucket{Capacity: 10, Rate: 1, Per: time.Second})
	ctx := context.Background()
	res, _ := l.AllowN(ctx, "upload:7", 8)
	fmt.Println(res.Allowed, res.Remaining)
	res, _ = l.AllowN(ctx, "upload:7", 8)
	fmt.Println(res.Allowed, res.Remaining)
	_, err := l.AllowN(ctx, "upload:7", 11)
	fmt.Println(err != nil)
	// Output:
	// true 2
	// false 2
	// true
}

// Peek looks without taking; Reset forgets a key ("unlock this user").
func ExampleLimiter_Reset() {
	l, _ := sluice.New(memstore.New(), sluice.SlidingLog{Limit: 2, Window: 15 * time.Minute, CountRejected: true}, sluice.WithName("login"))
	ctx := context.Background()
	for range 3 {
		l.Allow(ctx, "alice")
	}
	res, _ := l.Peek(ctx, "alice")
	fmt.Println("locked:", !res.Allowed)
	l.Reset(ctx, "alice")
	res, _ = l.Peek(ctx, "alice")
	fmt.Println("locked:", !res.Allowed, "remaining:", res.Remaining)
	// Output:
	// locked: true
	// locked: false remaining: 2
}

// AllowAll checks several limits on one request; when one refuses, the
// others get back what they took.
func ExampleAllowAll() {
	store := memstore.New()
	clock := sluicetest.NewClock() // a fake clock: no token is earned between the requests
	perKey, _ := sluice.New(store, sluice.GCRA{Rate: 100, Per: time.Second, Burst: 100},
		sluice.WithName("per-key"), sluice.WithClock(clock.Now))
	global, _ := sluice.New(store, sluice.FixedWindow{Limit: 2, Window: time.Minute},
		sluice.WithName("global"), sluice.WithClock(clock.Now))
	ctx := context.Background()
	for i := range 3 {
		d, _ := sluice.AllowAll(ctx, []sluice.Check{
			{Limiter: perKey, Key: "key_abc", Cost: 1},
			{Limiter: global, Key: "all", Cost: 1},
		})
		fmt.Printf("request %d: allowed=%v per-key remaining=%d\n", i+1, d.Allowed, d.Results[0].Remaining)
	}
	res, _ := perKey.Peek(ctx, "key_abc")
	fmt.Println("per-key remaining after the refusal:", res.Remaining)
	// Output:
	// request 1: allowed=true per-key remaining=99
	// request 2: allowed=true per-key remaining=98
	// request 3: allowed=false per-key remaining=98
	// per-key remaining after the refusal: 98
}

// A policy that cannot be enforced is refused with a *PolicyError naming
// the field.
func ExamplePolicyError() {
	_, err := sluice.New(memstore.New(), sluice.SlidingWindow{Limit: 100, Window: 0})
	var pe *sluice.PolicyError
	if errors.As(err, &pe) {
		fmt.Println(pe.Field, "-", pe.Reason)
	}
	fmt.Println(err)
	fmt.Println(errors.Is(err, sluice.ErrInvalidPolicy))
	// Output:
	// SlidingWindow.Window - SlidingWindow.Window must be at least 1ms, got 0s
	// sluice: invalid policy: SlidingWindow.Window must be at least 1ms, got 0s
	// true
}
