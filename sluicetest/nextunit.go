package sluicetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/ruleview"
)

// RunNextUnit checks sluice.Rule.NextUnit (the RateLimit header's t: the
// time until more units are available) against the store on random
// timelines: whenever it is known, a peek one microsecond before it still
// finds at most the Result's Remaining, and a peek at it finds more. Each
// peek runs on a replay of the timeline under a fresh key, so that no key
// sees time go back. For fixed window, token bucket and GCRA it must be
// known whenever some units are taken.
func RunNextUnit(t *testing.T, h Harness) {
	ctx := context.Background()
	for i, p := range []sluice.Policy{
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
		t.Run(fmt.Sprintf("%d_%T", i, p), func(t *testing.T) {
			clock := NewClock()
			l := h.NewLimiter(t, p, sluice.WithClock(clock.Now))
			c := &nextUnitCheck{t: t, ctx: ctx, l: l, clock: clock, rule: l.Rule()}
			r := rand.New(rand.NewPCG(uint64(i), 17))
			known := 0
			for timeline := range 3 {
				known += c.timeline(r, fmt.Sprintf("live-%d", timeline))
			}
			if known == 0 {
				t.Errorf("%v: NextUnit never known", c.rule)
			}
		})
	}
}

// nextUnitCheck checks NextUnit on one limiter with a settable clock.
type nextUnitCheck struct {
	t       *testing.T
	ctx     context.Context
	l       *sluice.Limiter
	clock   *Clock
	rule    sluice.Rule
	replays int
}

// nextUnitOp is one decision of a timeline.
type nextUnitOp struct {
	at   time.Duration
	cost int64
}

// timeline decides 10 random costs at random times on key, checking
// NextUnit after each, and returns how often it was known.
func (c *nextUnitCheck) timeline(r *rand.Rand, key string) int {
	rule := c.rule
	exact := rule.Algorithm != driver.AlgorithmSlidingLog && rule.Algorithm != driver.AlgorithmSlidingWindow
	known := 0
	var ops []nextUnitOp
	var now time.Duration
	for range 10 {
		now += time.Duration(r.IntN(120_000)) * time.Microsecond
		o := nextUnitOp{now, r.Int64N(rule.Limit + 1)}
		c.clock.Set(now)
		res := allowN(c.t, c.ctx, c.l, key, o.cost)
		ops = append(ops, o)
		if c.checkNextUnit(ops, res, exact) {
			known++
		}
	}
	return known
}

// checkNextUnit checks NextUnit after res, the Result of the last of ops,
// and reports whether it was known. With exact, it must be known once
// anything is used.
func (c *nextUnitCheck) checkNextUnit(ops []nextUnitOp, res sluice.Result, exact bool) bool {
	t, rule, last := c.t, c.rule, ops[len(ops)-1]
	d, ok := ruleview.NextUnit(rule, res, last.cost)
	if !ok {
		if exact && res.Remaining < rule.Limit {
			t.Fatalf("%v: NextUnit unknown after %+v", rule, res)
		}
		return false
	}
	if !res.Allowed && d > res.RetryAfter {
		t.Fatalf("%v: NextUnit %v after a refusal with RetryAfter %v", rule, d, res.RetryAfter)
	}
	if before := c.peek(ops, last.at+d-time.Microsecond); before.Remaining > res.Remaining {
		t.Fatalf("%v after %v (%+v): NextUnit %v, but %d units a microsecond earlier", rule, ops, res, d, before.Remaining)
	}
	if at := c.peek(ops, last.at+d); at.Remaining <= res.Remaining {
		t.Fatalf("%v after %v (%+v): NextUnit %v, but still %d units then", rule, ops, res, d, at.Remaining)
	}
	return true
}

// peek replays ops under a fresh key and peeks at at.
func (c *nextUnitCheck) peek(ops []nextUnitOp, at time.Duration) sluice.Result {
	c.replays++
	key := fmt.Sprintf("replay-%d", c.replays)
	for _, o := range ops {
		c.clock.Set(o.at)
		allowN(c.t, c.ctx, c.l, key, o.cost)
	}
	c.clock.Set(at)
	res, err := c.l.Peek(c.ctx, key)
	if err != nil {
		c.t.Fatal(err)
	}
	return res
}
