package sluice_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// A key refused 3 times within a minute is blocked for a minute, then 2,
// 4 and 8 minutes at most while it keeps offending, until a day passes
// without a block.
func ExampleWithPenalty() {
	clock := sluicetest.NewClock()
	store := memstore.New(memstore.WithClock(clock.Now))
	l, err := sluice.New(store, sluice.FixedWindow{Limit: 2, Window: time.Hour},
		sluice.WithClock(clock.Now),
		sluice.WithPenalty(sluice.Penalty{After: 3, Within: time.Minute,
			Block: time.Minute, MaxBlock: 8 * time.Minute, Forgive: 24 * time.Hour}))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := range 6 {
		res, _ := l.Allow(ctx, "203.0.113.7")
		fmt.Printf("%d: allowed %v, blocked %v, retry after %v\n", i, res.Allowed, res.Blocked, res.RetryAfter)
	}
	clock.Advance(time.Minute) // the block ends; the window still refuses
	for range 3 {
		l.Allow(ctx, "203.0.113.7")
	}
	res, _ := l.Allow(ctx, "203.0.113.7")
	fmt.Println("again: blocked", res.Blocked, "for", res.RetryAfter)
	// Output:
	// 0: allowed true, blocked false, retry after 0s
	// 1: allowed true, blocked false, retry after 0s
	// 2: allowed false, blocked false, retry after 1h0m0s
	// 3: allowed false, blocked false, retry after 1h0m0s
	// 4: allowed false, blocked true, retry after 1m0s
	// 5: allowed false, blocked true, retry after 1m0s
	// again: blocked true for 2m0s
}
