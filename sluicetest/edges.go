package sluicetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// RunEdges checks the edges where rounding and refunds used to go wrong:
// exact token-bucket arithmetic at token boundaries, refunds across a
// window edge, and limiters of different algorithms under one name.
func RunEdges(t *testing.T, h Harness) {
	t.Run("TokenBucketExact", func(t *testing.T) { RunTokenBucketExact(t, h) })
	t.Run("RefundAcrossWindowEdge", func(t *testing.T) { RunRefundAcrossWindowEdge(t, h) })
	t.Run("AlgorithmChangeUnderOneName", func(t *testing.T) { RunAlgorithmChangeUnderOneName(t, h) })
}

// RunTokenBucketExact: one request every 100ms from 0 to 900ms on a bucket
// of 10 earning 1 per second leaves exactly 0.9 tokens at 0.9s and so 3 at
// 3s: Peek says 3 and AllowN(3) is allowed; a refused request is allowed at
// exactly RetryAfter and refused a microsecond before it.
func RunTokenBucketExact(t *testing.T, h Harness) {
	ctx := context.Background()
	for _, p := range []sluice.Policy{
		sluice.TokenBucket{Capacity: 10, Rate: 1, Per: time.Second},
		sluice.GCRA{Rate: 1, Per: time.Second, Burst: 10},
	} {
		t.Run(fmt.Sprintf("%T", p), func(t *testing.T) {
			clock := NewClock()
			l := h.NewLimiter(t, p, sluice.WithClock(clock.Now))
			bucketEarnsExactly(t, ctx, l, clock)
			bucketRefillsAtRetryAfter(t, ctx, l, clock)
		})
	}
}

// bucketEarnsExactly takes one token every 100ms from 0 to 900ms from a
// bucket of 10 earning 1 per second, and checks that at 3s exactly 3
// tokens are there: Peek says so, 4 are refused for 1s, 3 are allowed.
func bucketEarnsExactly(t *testing.T, ctx context.Context, l *sluice.Limiter, clock *Clock) {
	for i := range 10 {
		clock.Set(time.Duration(i) * 100 * ms)
		if res, err := l.Allow(ctx, "k"); err != nil || !res.Allowed {
			t.Fatalf("request %d: %+v %v", i, res, err)
		}
	}
	// Taken: 10 tokens by 0.9s; earned by 3s: 3 (one per second).
	clock.Set(3 * time.Second)
	if res, _ := l.Peek(ctx, "k"); res.Remaining != 3 || res.ResetAfter != 7*time.Second {
		t.Fatalf("Peek at 3s: %+v, want 3 remaining, full in 7s", res)
	}
	if res, _ := l.AllowN(ctx, "k", 4); res.Allowed || res.RetryAfter != time.Second {
		t.Fatalf("AllowN(4) at 3s: %+v, want refused for exactly 1s", res)
	}
	if res, _ := l.AllowN(ctx, "k", 3); !res.Allowed || res.Remaining != 0 {
		t.Fatalf("AllowN(3) at 3s: %+v, want allowed", res)
	}
}

// bucketRefillsAtRetryAfter empties the full bucket at 20s and checks
// that the next request is refused for exactly 1s, still refused (for
// 1µs) a microsecond before, and allowed at exactly RetryAfter.
func bucketRefillsAtRetryAfter(t *testing.T, ctx context.Context, l *sluice.Limiter, clock *Clock) {
	clock.Set(20 * time.Second) // full again
	res, _ := l.AllowN(ctx, "k", 10)
	if !res.Allowed {
		t.Fatalf("full bucket at 20s: %+v", res)
	}
	res, _ = l.Allow(ctx, "k")
	if res.Allowed || res.RetryAfter != time.Second {
		t.Fatalf("empty bucket: %+v, want refused for exactly 1s", res)
	}
	clock.Advance(res.RetryAfter - time.Microsecond)
	if res, _ := l.Allow(ctx, "k"); res.Allowed || res.RetryAfter != time.Microsecond {
		t.Fatalf("1µs before RetryAfter: %+v, want refused for 1µs", res)
	}
	clock.Advance(time.Microsecond)
	if res, _ := l.Allow(ctx, "k"); !res.Allowed {
		t.Fatalf("at RetryAfter: %+v, want allowed", res)
	}
}

// RunRefundAcrossWindowEdge: a refund decided after the window of its take
// has ended gives nothing back to the new window (it never lets a fixed
// window of 3 admit a 4th), deletes nothing of it, and a sliding log's
// refund removes only the entries of its own take.
func RunRefundAcrossWindowEdge(t *testing.T, h Harness) {
	for _, p := range []sluice.Policy{
		sluice.FixedWindow{Limit: 3, Window: time.Second},
		sluice.SlidingWindow{Limit: 3, Window: time.Second},
		sluice.SlidingLog{Limit: 3, Window: time.Second},
	} {
		t.Run(fmt.Sprintf("%T", p), func(t *testing.T) { lateRefundInNewWindow(t, h, p) })
	}
	for _, p := range []sluice.Policy{
		sluice.TokenBucket{Capacity: 3, Rate: 1, Per: time.Second},
		sluice.GCRA{Rate: 1, Per: time.Second, Burst: 3},
	} {
		t.Run(fmt.Sprintf("%T", p), func(t *testing.T) { bucketRefund(t, h, p) })
	}
	t.Run("SlidingLogOwnEntries", func(t *testing.T) { slidingLogRefundOwnEntries(t, h) })
}

// doAt decides one op of key under rule at at after Epoch on h.Store.
func doAt(t *testing.T, h Harness, key string, rule sluice.Rule, at time.Duration, cost, receipt int64) driver.Op {
	t.Helper()
	ops := []driver.Op{{Key: key, Rule: rule, Cost: cost, Receipt: receipt, Now: Epoch.Add(at)}}
	if err := h.Store.Do(context.Background(), ops); err != nil || ops[0].Err != nil {
		t.Fatal(err, ops[0].Err)
	}
	return ops[0]
}

// lateRefundInNewWindow: a refund decided after the window of its take
// has ended gives nothing back to the new window.
func lateRefundInNewWindow(t *testing.T, h Harness, p sluice.Policy) {
	l := h.NewLimiter(t, p)
	rule, key := l.Rule(), storeKey(l, "k")
	do := func(at time.Duration, cost, receipt int64) driver.Op { return doAt(t, h, key, rule, at, cost, receipt) }
	take := do(999*ms, 1, 0) // the last millisecond of the first window
	if !take.Result.Allowed {
		t.Fatalf("take: %+v", take.Result)
	}
	at := time.Second + 500*ms // the next window
	switch p.(type) {
	case sluice.SlidingWindow:
		at = 2*time.Second + 500*ms // where the first window no longer counts
	case sluice.SlidingLog:
		at = 2 * time.Second // the take's entry has left the log
	}
	for i := range 3 {
		if op := do(at, 1, 0); !op.Result.Allowed {
			t.Fatalf("request %d of the new window: %+v", i, op.Result)
		}
	}
	refund := do(at, -1, take.Receipt)
	if refund.Result.Remaining != 0 {
		t.Fatalf("refund of the old window's take: %+v, want nothing given back", refund.Result)
	}
	if op := do(at, 1, 0); op.Result.Allowed {
		t.Fatalf("4th request of a window of 3 after a late refund: %+v", op.Result)
	}
}

// bucketRefund: a bucket's refund undoes its take while no later take
// wrote the key, and gives nothing back once one did.
func bucketRefund(t *testing.T, h Harness, p sluice.Policy) {
	l := h.NewLimiter(t, p)
	rule := l.Rule()
	do := func(key string, at time.Duration, cost, receipt int64) driver.Op {
		return doAt(t, h, storeKey(l, key), rule, at, cost, receipt)
	}
	a := do("alone", 0, 2, 0)
	if r := do("alone", 10*ms, -2, a.Receipt); r.Result.Remaining != 3 || r.Result.ResetAfter != 0 {
		t.Fatalf("refund of the last take: %+v, want the bucket full again", r.Result)
	}
	a = do("busy", 0, 2, 0)
	do("busy", 5*ms, 1, 0) // another request takes from the key
	if r := do("busy", 10*ms, -2, a.Receipt); r.Result.Remaining != 0 {
		t.Fatalf("refund after a later take: %+v, want nothing given back", r.Result)
	}
}

// slidingLogRefundOwnEntries: the sliding log's refund removes its own
// entries, not newer ones.
func slidingLogRefundOwnEntries(t *testing.T, h Harness) {
	l := h.NewLimiter(t, sluice.SlidingLog{Limit: 3, Window: time.Second})
	rule, key := l.Rule(), storeKey(l, "k")
	do := func(at time.Duration, cost, receipt int64) driver.Op { return doAt(t, h, key, rule, at, cost, receipt) }
	first := do(0, 1, 0)
	do(500*ms, 2, 0)
	do(600*ms, -1, first.Receipt) // gives back the entry at 0, not one at 500ms
	// Left: the two entries at 500ms, so a request of 2 waits for the
	// first of them to leave, at 1.5s (had a 500ms entry been removed,
	// the one at 0 would have let it in at 1s).
	if op := do(600*ms, 2, 0); op.Result.Allowed || op.Result.RetryAfter != 900*ms || op.Result.Remaining != 1 {
		t.Fatalf("after the refund: %+v, want 1 remaining and a cost of 2 allowed in 900ms", op.Result)
	}
}

// RunAlgorithmChangeUnderOneName: two limiters with one name and different
// algorithms (a rolling deploy that changes a policy's algorithm runs both
// at once) each enforce their own limit on their own state: neither errs,
// neither reads the other's state, and a fail-open limiter is never
// switched off.
func RunAlgorithmChangeUnderOneName(t *testing.T, h Harness) {
	ctx := context.Background()
	policies := []sluice.Policy{
		sluice.FixedWindow{Limit: 3, Window: time.Minute},
		sluice.SlidingWindow{Limit: 3, Window: time.Minute},
		sluice.SlidingLog{Limit: 3, Window: time.Minute},
		sluice.TokenBucket{Capacity: 3, Rate: 3, Per: time.Minute},
		sluice.GCRA{Rate: 3, Per: time.Minute, Burst: 3},
	}
	ls := limitersUnderOneName(t, h, policies, NewClock())
	allowed := interleave(t, ctx, ls)
	for i, n := range allowed {
		if n != 3 {
			t.Errorf("%v under the shared name: %d of 5 allowed, want 3", ls[i].Rule(), n)
		}
	}
}

// limitersUnderOneName makes a limiter of each of policies, all named
// "api" under one prefix, on clock.
func limitersUnderOneName(t *testing.T, h Harness, policies []sluice.Policy, clock *Clock) []*sluice.Limiter {
	prefix := Prefix(t)
	var ls []*sluice.Limiter
	for _, p := range policies {
		l, err := sluice.New(h.Store, p, sluice.WithName("api"), sluice.WithPrefix(prefix), sluice.WithClock(clock.Now),
			sluice.WithTimeout(5*time.Second), sluice.WithDenyCache(false))
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	return ls
}

// interleave sends five requests for "user" to each of ls, interleaved as
// two versions of a service would send them, failing on an error or a
// degraded decision, and returns how many each allowed.
func interleave(t *testing.T, ctx context.Context, ls []*sluice.Limiter) []int {
	allowed := make([]int, len(ls))
	for range 5 {
		for i, l := range ls {
			res, err := l.Allow(ctx, "user")
			if err != nil || res.Degraded {
				t.Fatalf("%v: %+v %v: a limiter of another algorithm under the same name broke it", l.Rule(), res, err)
			}
			if res.Allowed {
				allowed[i]++
			}
		}
	}
	return allowed
}
