package sluice_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// TestNextUnit checks Rule.NextUnit against the algorithms themselves on
// random timelines: when it is known, a peek (on a replay of the same
// history) one microsecond before it still finds at most res.Remaining
// units, and a peek at it finds more. It is known whenever the algorithm's
// Result determines it (see NextUnit).
func TestNextUnit(t *testing.T) {
	type op struct {
		at   time.Duration
		cost int64
	}
	ctx := context.Background()
	epoch := time.Unix(1_800_000_000, 0)
	// replay runs ops on a fresh store and then peeks at at.
	replay := func(p sluice.Policy, ops []op, at time.Duration) sluice.Result {
		var now time.Time
		l, err := sluice.New(memstore.New(), p, sluice.WithClock(func() time.Time { return now }), sluice.WithDenyCache(false))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range ops {
			now = epoch.Add(o.at)
			if _, err := l.AllowN(ctx, "k", o.cost); err != nil {
				t.Fatal(err)
			}
		}
		now = epoch.Add(at)
		res, err := l.Peek(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	r := rand.New(rand.NewPCG(3, 5))
	for _, p := range []sluice.Policy{
		sluice.FixedWindow{Limit: 4, Window: 300 * time.Millisecond},
		sluice.FixedWindow{Limit: 3, Window: 300 * time.Millisecond, CountRejected: true},
		sluice.SlidingLog{Limit: 4, Window: 300 * time.Millisecond},
		sluice.SlidingLog{Limit: 3, Window: 300 * time.Millisecond, CountRejected: true},
		sluice.SlidingWindow{Limit: 5, Window: 300 * time.Millisecond},
		sluice.TokenBucket{Capacity: 4, Rate: 10, Per: time.Second},
		sluice.TokenBucket{Capacity: 5, Rate: 3, Per: 700 * time.Millisecond},
		sluice.GCRA{Rate: 10, Per: time.Second, Burst: 4},
		sluice.GCRA{Rate: 7, Per: 900 * time.Millisecond, Burst: 3},
	} {
		rule, err := p.Rule()
		if err != nil {
			t.Fatal(err)
		}
		known := 0
		for range 30 {
			var ops []op
			var now time.Duration
			var live *sluice.Limiter
			var clock time.Time
			live, _ = sluice.New(memstore.New(), p, sluice.WithClock(func() time.Time { return clock }), sluice.WithDenyCache(false))
			for range 12 {
				now += time.Duration(r.IntN(120_000)) * time.Microsecond
				o := op{now, r.Int64N(rule.Limit + 1)}
				clock = epoch.Add(now)
				res, err := live.AllowN(ctx, "k", o.cost)
				if err != nil {
					t.Fatal(err)
				}
				ops = append(ops, o)
				d, ok := rule.NextUnit(res, o.cost)
				exact := rule.Algorithm != sluice.AlgorithmSlidingLog && rule.Algorithm != sluice.AlgorithmSlidingWindow
				if !ok && exact && res.Remaining < rule.Limit {
					t.Fatalf("%v: NextUnit unknown for %+v", rule, res)
				}
				if !ok {
					continue
				}
				known++
				if !res.Allowed && d > res.RetryAfter {
					t.Fatalf("%v: NextUnit %v after a refusal with RetryAfter %v", rule, d, res.RetryAfter)
				}
				if before := replay(p, ops, now+d-time.Microsecond); before.Remaining > res.Remaining {
					t.Fatalf("%v after %v: NextUnit %v, but %d units (more than %d) a microsecond earlier", rule, ops, d, before.Remaining, res.Remaining)
				}
				if at := replay(p, ops, now+d); at.Remaining <= res.Remaining {
					t.Fatalf("%v after %v (%+v): NextUnit %v, but still %d units then", rule, ops, res, d, at.Remaining)
				}
			}
		}
		if known == 0 {
			t.Errorf("%v: NextUnit never known", rule)
		}
	}
}
