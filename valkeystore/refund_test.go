package valkeystore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/valkeytest"
)

// TestRefundAfterWindowEdgeValkeyClock: on Valkey's clock, a refund that
// arrives after the window of its take has ended gives nothing to the new
// window: a fixed window of 3 never admits a 4th.
func TestRefundAfterWindowEdgeValkeyClock(t *testing.T) {
	s := newStore(t, valkeytest.Shared(t).Client(t))
	ctx := context.Background()
	const w = 200 * time.Millisecond
	rule, err := sluice.FixedWindow{Limit: 3, Window: w}.Rule()
	if err != nil {
		t.Fatal(err)
	}
	prefix := sluicetest.Prefix(t)
	do := func(key string, cost, receipt int64) driver.Op {
		t.Helper()
		ops := []driver.Op{{Key: key, Rule: rule, Cost: cost, Receipt: receipt}} // Now: Valkey's TIME
		if err := s.Do(ctx, ops); err != nil || ops[0].Err != nil {
			t.Fatal(err, ops[0].Err)
		}
		return ops[0]
	}
	window := func(receipt int64) int64 { return receipt / w.Microseconds() }
	for attempt := range 5 {
		key := driver.Key(prefix, "fw", rule, string(rune('a'+attempt)))
		take := do(key, 1, 0)
		// Valkey runs on this machine's clock: wait for the next window.
		end := time.UnixMicro((window(take.Receipt) + 1) * w.Microseconds())
		time.Sleep(time.Until(end) + 5*time.Millisecond)
		var fill []driver.Op
		for range 3 {
			fill = append(fill, do(key, 1, 0))
		}
		refund := do(key, -1, take.Receipt)
		fourth := do(key, 1, 0)
		if window(fourth.Receipt) != window(fill[0].Receipt) || window(fill[0].Receipt) == window(take.Receipt) {
			continue // a window edge fell among the requests: try again
		}
		for i, op := range fill {
			if !op.Result.Allowed {
				t.Fatalf("request %d of the new window: %+v", i, op.Result)
			}
		}
		if refund.Result.Remaining != 0 || fourth.Result.Allowed {
			t.Fatalf("late refund gave back to the new window: refund %+v, 4th request %+v", refund.Result, fourth.Result)
		}
		return
	}
	t.Fatal("every attempt straddled a window edge")
}
