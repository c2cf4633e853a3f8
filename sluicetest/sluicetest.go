// Package sluicetest is the conformance suite every driver.Store must pass:
// the algorithms' timelines under a fake clock, exact recovery after
// RetryAfter, window boundaries, peeks, refunds, resets, concurrency and the
// key-expiry invariant. Packages memstore and valkeystore run it; so can any
// other Store.
package sluicetest

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// Harness is what the suite needs of a Store.
type Harness struct {
	// Store is the store under test. Tests share it, each under its own key
	// prefix.
	Store driver.Store
	// TTLs returns every key that starts with prefix and its time to live
	// (negative for a key that never expires).
	TTLs func(t testing.TB, prefix string) map[string]time.Duration
}

// Policies are the policies the suite runs each generic test with: every
// algorithm, with small limits and windows.
func Policies() []sluice.Policy {
	return []sluice.Policy{
		sluice.FixedWindow{Limit: 5, Window: time.Second},
		sluice.SlidingLog{Limit: 5, Window: time.Second},
		sluice.SlidingLog{Limit: 5, Window: time.Second, CountRejected: true},
		sluice.SlidingWindow{Limit: 5, Window: time.Second},
		sluice.TokenBucket{Capacity: 5, Rate: 5, Per: time.Second},
		sluice.GCRA{Rate: 5, Per: time.Second, Burst: 5},
	}
}

var prefixSeq atomic.Int64

// Prefix returns a key prefix no other test of this process uses.
func Prefix(t testing.TB) string {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, t.Name())
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	return fmt.Sprintf("t%d:%s", prefixSeq.Add(1), name)
}

// NewLimiter returns a limiter on h.Store under a fresh prefix. After the
// test it checks the key-expiry invariant for that prefix.
func (h Harness) NewLimiter(t testing.TB, p sluice.Policy, opts ...sluice.Option) *sluice.Limiter {
	t.Helper()
	prefix := Prefix(t)
	// The deny cache is off: the suite tests the store, and the cache would
	// answer refusals locally.
	l, err := sluice.New(h.Store, p, append([]sluice.Option{sluice.WithPrefix(prefix), sluice.WithTimeout(5 * time.Second), sluice.WithDenyCache(false)}, opts...)...)
	if err != nil {
		t.Fatalf("sluice.New(%#v): %v", p, err)
	}
	t.Cleanup(func() { h.CheckTTLs(t, prefix, l.Rule()) })
	prefixes.Store(l, prefix)
	return l
}

// prefixes holds the key prefix of each limiter NewLimiter made, for
// storeKey.
var prefixes sync.Map // *sluice.Limiter → string

// storeKey returns the store key of identity under l, a limiter of
// NewLimiter, as l's decisions send it.
func storeKey(l *sluice.Limiter, identity string) string {
	prefix, ok := prefixes.Load(l)
	if !ok {
		panic("sluicetest: storeKey of a limiter NewLimiter did not make")
	}
	return driver.Key(prefix.(string), l.Name(), l.Rule(), identity)
}

// TTLBound is the longest time to live a key of rule may have: what the
// algorithm needs, in whole milliseconds, plus driver.KeyTTLMargin.
func TTLBound(r sluice.Rule) time.Duration { return r.TTL() }

// CheckTTLs fails t unless every key under prefix expires, within
// TTLBound(rule).
func (h Harness) CheckTTLs(t testing.TB, prefix string, rule sluice.Rule) {
	t.Helper()
	if h.TTLs == nil {
		return
	}
	bound := TTLBound(rule)
	for k, ttl := range h.TTLs(t, prefix+":") {
		if ttl <= 0 || ttl > bound {
			t.Errorf("key %s has TTL %v, want in (0, %v] for %v", k, ttl, bound, rule)
		}
	}
}

// Run runs the whole suite.
func Run(t *testing.T, h Harness) {
	t.Run("Timelines", func(t *testing.T) { RunTimelines(t, h) })
	t.Run("Recovery", func(t *testing.T) { RunRecovery(t, h) })
	t.Run("Boundaries", func(t *testing.T) { RunBoundaries(t, h) })
	t.Run("SlidingWindowWorstCase", func(t *testing.T) { RunSlidingWindowWorstCase(t, h) })
	t.Run("NextUnit", func(t *testing.T) { RunNextUnit(t, h) })
	t.Run("PeekResetRefund", func(t *testing.T) { RunPeekResetRefund(t, h) })
	t.Run("Concurrency", func(t *testing.T) { RunConcurrency(t, h) })
	t.Run("RealTime", func(t *testing.T) { RunRealTime(t, h) })
	t.Run("Edges", func(t *testing.T) { RunEdges(t, h) })
	t.Run("Calendar", func(t *testing.T) { RunCalendar(t, h) })
	t.Run("Plans", func(t *testing.T) { RunPlans(t, h) })
	t.Run("Overrides", func(t *testing.T) { RunOverrides(t, h) })
	t.Run("Clocks", func(t *testing.T) { RunClocks(t, h) })
	t.Run("Penalties", func(t *testing.T) { RunPenalties(t, h) })
}

// A Step is one row of a timeline: at At after Epoch, a request of Cost
// gets the given Result (Limit is filled in from the policy).
type Step struct {
	At         time.Duration
	Cost       int64
	Allowed    bool
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration
}

// Timeline runs steps against a fresh limiter for p under a fake clock.
func (h Harness) Timeline(t *testing.T, p sluice.Policy, steps []Step) {
	t.Helper()
	clock := NewClock()
	l := h.NewLimiter(t, p, sluice.WithClock(clock.Now))
	ctx := context.Background()
	for i, s := range steps {
		clock.Set(s.At)
		got, err := l.AllowN(ctx, "user", s.Cost)
		if err != nil {
			t.Fatalf("step %d (at %v, cost %d): %v", i, s.At, s.Cost, err)
		}
		want := sluice.Result{Allowed: s.Allowed, Limit: l.Rule().Limit, Remaining: s.Remaining, RetryAfter: s.RetryAfter, ResetAfter: s.ResetAfter}
		if got != want {
			t.Errorf("step %d (at %v, cost %d):\n got %+v\nwant %+v", i, s.At, s.Cost, got, want)
		}
	}
}

const ms = time.Millisecond

// RunTimelines checks each algorithm against a hand-computed timeline.
func RunTimelines(t *testing.T, h Harness) {
	for _, tl := range timelines {
		t.Run(tl.name, func(t *testing.T) { h.Timeline(t, tl.policy, tl.steps) })
	}
}

// timelines are the hand-computed timelines RunTimelines checks.
var timelines = []struct {
	name   string
	policy sluice.Policy
	steps  []Step
}{
	{"FixedWindow", sluice.FixedWindow{Limit: 3, Window: time.Second}, []Step{
		{0, 1, true, 2, 0, 1000 * ms},
		{0, 1, true, 1, 0, 1000 * ms},
		{100 * ms, 1, true, 0, 0, 900 * ms},
		{200 * ms, 1, false, 0, 800 * ms, 800 * ms},
		{200 * ms, 0, false, 0, 800 * ms, 800 * ms}, // a peek says the same
		{999_999 * time.Microsecond, 1, false, 0, time.Microsecond, time.Microsecond},
		{1000 * ms, 1, true, 2, 0, 1000 * ms}, // a new window
		{1000 * ms, 3, false, 2, 1000 * ms, 1000 * ms},
		{1000 * ms, 2, true, 0, 0, 1000 * ms},
		{3500 * ms, 0, true, 3, 0, 0}, // an old window is forgotten
	}},
	{"SlidingLog", sluice.SlidingLog{Limit: 3, Window: time.Second}, []Step{
		{0, 1, true, 2, 0, 1000 * ms},
		{100 * ms, 1, true, 1, 0, 1000 * ms},
		{200 * ms, 1, true, 0, 0, 1000 * ms},
		// The oldest entry (at 0) leaves the window at 1s.
		{300 * ms, 1, false, 0, 700 * ms, 900 * ms},
		{999 * ms, 0, false, 0, 1 * ms, 201 * ms},
		{1000 * ms, 1, true, 0, 0, 1000 * ms},
		// Two units: the second-oldest entry (200ms) must leave too.
		{1000 * ms, 2, false, 0, 200 * ms, 1000 * ms},
		{1200 * ms, 2, true, 0, 0, 1000 * ms},
		{2200 * ms, 0, true, 3, 0, 0},
	}},
	{"FixedWindowCountRejected", sluice.FixedWindow{Limit: 3, Window: time.Second, CountRejected: true}, []Step{
		{0, 2, true, 1, 0, 1000 * ms},
		// Refused, and counted: the count is now 4, over the limit.
		{100 * ms, 2, false, 0, 900 * ms, 900 * ms},
		// Without CountRejected one unit would still fit.
		{200 * ms, 1, false, 0, 800 * ms, 800 * ms},
		{300 * ms, 0, false, 0, 700 * ms, 700 * ms},
		// The next window starts from zero.
		{1000 * ms, 3, true, 0, 0, 1000 * ms},
	}},
	{"SlidingLogCountRejected", sluice.SlidingLog{Limit: 2, Window: time.Second, CountRejected: true}, []Step{
		{0, 1, true, 1, 0, 1000 * ms},
		{0, 1, true, 0, 0, 1000 * ms},
		// Refused, and logged: the client must now wait for the entry at 0.
		{500 * ms, 1, false, 0, 500 * ms, 1000 * ms},
		{1000 * ms, 1, true, 0, 0, 1000 * ms},
		// Hammering moves the lockout: the refused entry at 1.4s counts.
		{1400 * ms, 1, false, 0, 600 * ms, 1000 * ms},
		// Without CountRejected this would be allowed at 2s; the refusal
		// at 1.9s pushes it to 2.4s.
		{1900 * ms, 1, false, 0, 500 * ms, 1000 * ms},
		{2400 * ms, 1, true, 0, 0, 1000 * ms},
		{3400 * ms, 1, true, 1, 0, 1000 * ms},
	}},
	{"SlidingWindow", sluice.SlidingWindow{Limit: 10, Window: time.Second}, []Step{
		{0, 5, true, 5, 0, 2000 * ms},
		{500 * ms, 5, true, 0, 0, 1500 * ms},
		// Full: the next unit fits once the previous window (10) weighs
		// at most 9: 100ms into the next window.
		{600 * ms, 1, false, 0, 500 * ms, 1400 * ms},
		{1100 * ms, 1, true, 0, 0, 1900 * ms},
		// estimate = 10×0.9 + 1 = 10: one more fits after 100ms more.
		{1100 * ms, 1, false, 0, 100 * ms, 1900 * ms},
		{1200 * ms, 1, true, 0, 0, 1800 * ms},
		// Two windows later everything is forgotten.
		{3000 * ms, 0, true, 10, 0, 0},
	}},
	{"TokenBucket", sluice.TokenBucket{Capacity: 3, Rate: 1, Per: time.Second}, []Step{
		{0, 1, true, 2, 0, 1000 * ms},
		{0, 1, true, 1, 0, 2000 * ms},
		{0, 1, true, 0, 0, 3000 * ms},
		{0, 1, false, 0, 1000 * ms, 3000 * ms},
		{1000 * ms, 1, true, 0, 0, 3000 * ms},
		{1500 * ms, 0, false, 0, 500 * ms, 2500 * ms}, // half a token
		{1500 * ms, 1, false, 0, 500 * ms, 2500 * ms},
		{3000 * ms, 2, true, 0, 0, 3000 * ms},
		{9000 * ms, 0, true, 3, 0, 0},
	}},
	{"GCRA", sluice.GCRA{Rate: 1, Per: time.Second, Burst: 3}, []Step{
		{0, 1, true, 2, 0, 1000 * ms},
		{0, 1, true, 1, 0, 2000 * ms},
		{0, 1, true, 0, 0, 3000 * ms},
		{0, 1, false, 0, 1000 * ms, 3000 * ms},
		{1000 * ms, 1, true, 0, 0, 3000 * ms},
		{1500 * ms, 0, false, 0, 500 * ms, 2500 * ms},
		{1500 * ms, 1, false, 0, 500 * ms, 2500 * ms},
		{3000 * ms, 2, true, 0, 0, 3000 * ms},
		{9000 * ms, 0, true, 3, 0, 0},
	}},
}

// RunRecovery exhausts each policy, then checks that the request is refused
// just before the advertised RetryAfter and allowed exactly at it, for
// costs of one and more, three times over.
func RunRecovery(t *testing.T, h Harness) {
	for _, p := range Policies() {
		for _, cost := range []int64{1, 2, 5} {
			t.Run(fmt.Sprintf("%v/cost%d", ruleOf(t, p), cost), func(t *testing.T) { recoverAtRetryAfter(t, h, p, cost) })
		}
	}
}

// recoverAtRetryAfter is RunRecovery for one policy and cost: exhaust the
// key off any window boundary, then three rounds of recoveryRound.
func recoverAtRetryAfter(t *testing.T, h Harness, p sluice.Policy, cost int64) {
	ctx := context.Background()
	clock := NewClock()
	l := h.NewLimiter(t, p, sluice.WithClock(clock.Now))
	clock.Set(123_457 * time.Microsecond) // off any boundary
	res := exhaustAdvancing(t, ctx, l, clock, cost)
	for round := 0; round < 3; round++ {
		res = recoveryRound(t, ctx, l, clock, cost, round, res)
	}
}

// exhaustAdvancing takes cost from "k", 7µs apart, until it is refused
// (failing after a hundred allowed), and returns the refusal.
func exhaustAdvancing(t *testing.T, ctx context.Context, l *sluice.Limiter, clock *Clock, cost int64) sluice.Result {
	for i := 0; ; i++ {
		if res := allowN(t, ctx, l, "k", cost); !res.Allowed {
			return res
		}
		if i > 100 {
			t.Fatal("never refused")
		}
		clock.Advance(7 * time.Microsecond)
	}
}

// recoveryRound checks that refusal res holds until 1µs before its
// RetryAfter and (unless the rule counts rejected requests, when that
// early attempt moves the lockout) lifts exactly at it, then exhausts
// the key again. It returns the refusal the next round starts from.
func recoveryRound(t *testing.T, ctx context.Context, l *sluice.Limiter, clock *Clock, cost int64, round int, res sluice.Result) sluice.Result {
	if res.RetryAfter <= 0 || res.Remaining < 0 {
		t.Fatalf("round %d: refusal %+v: want RetryAfter > 0 and Remaining >= 0", round, res)
	}
	wait := res.RetryAfter
	clock.Advance(wait - time.Microsecond)
	early := allowN(t, ctx, l, "k", cost)
	if early.Allowed {
		t.Fatalf("round %d: allowed 1µs before RetryAfter %v", round, wait)
	}
	if l.Rule().CountRejected {
		// The early attempt was logged: it moved the lockout.
		return early
	}
	clock.Advance(time.Microsecond)
	got := allowN(t, ctx, l, "k", cost)
	if !got.Allowed {
		t.Fatalf("round %d: refused after waiting RetryAfter %v: %+v", round, wait, got)
	}
	// Exhaust again for the next round.
	for got.Allowed {
		got = allowN(t, ctx, l, "k", cost)
	}
	return got
}

// allowN is l.AllowN, failing t on an error.
func allowN(t testing.TB, ctx context.Context, l *sluice.Limiter, key string, cost int64) sluice.Result {
	t.Helper()
	res, err := l.AllowN(ctx, key, cost)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func ruleOf(t testing.TB, p sluice.Policy) sluice.Rule {
	r, err := p.Rule()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// RunBoundaries sends a full burst just before a window edge and another
// just after it: fixed window allows both, sliding log neither, the sliding
// window counter as its formula says, and the buckets what refilled.
func RunBoundaries(t *testing.T, h Harness) {
	const limit = 10
	w := time.Second
	cases := []struct {
		p         sluice.Policy
		wantAfter int
	}{
		{sluice.FixedWindow{Limit: limit, Window: w}, limit},
		{sluice.SlidingLog{Limit: limit, Window: w}, 0},
		// estimate = 10 × (1 − 2ms/1s) = 9.98: no whole unit fits.
		{sluice.SlidingWindow{Limit: limit, Window: w}, int(math.Floor(limit - limit*(1-0.002)))},
		// 4ms at 10/s refill 0.04 tokens.
		{sluice.TokenBucket{Capacity: limit, Rate: limit, Per: w}, 0},
		{sluice.GCRA{Rate: limit, Per: w, Burst: limit}, 0},
	}
	ctx := context.Background()
	for _, c := range cases {
		t.Run(fmt.Sprintf("%T", c.p), func(t *testing.T) {
			clock := NewClock()
			l := h.NewLimiter(t, c.p, sluice.WithClock(clock.Now))
			burst := func() int {
				n := 0
				for range limit {
					res, err := l.Allow(ctx, "edge")
					if err != nil {
						t.Fatal(err)
					}
					if res.Allowed {
						n++
					}
				}
				return n
			}
			clock.Set(w - 2*ms)
			if n := burst(); n != limit {
				t.Fatalf("before the edge: %d allowed, want %d", n, limit)
			}
			clock.Set(w + 2*ms)
			if n := burst(); n != c.wantAfter {
				t.Fatalf("after the edge: %d allowed, want %d", n, c.wantAfter)
			}
		})
	}
}

// RunSlidingWindowWorstCase shows the sliding window counter admitting
// 2×Limit−1 within one window's span, its worst case: Limit in the last
// microsecond of a window, then Limit−1 more two microseconds before the
// next edge, when the previous window's weight has decayed to 2µs/Window.
// The Limit-th unit of the second burst is refused: the estimate is then
// Limit−1 + Limit×2µs/Window, and one more does not fit. An exact sliding
// log never holds more than Limit in a span of one window.
func RunSlidingWindowWorstCase(t *testing.T, h Harness) {
	const limit = 10
	w := time.Second
	ctx := context.Background()
	clock := NewClock()
	l := h.NewLimiter(t, sluice.SlidingWindow{Limit: limit, Window: w}, sluice.WithClock(clock.Now))
	burst := func(n int) int {
		allowed := 0
		for range n {
			res, err := l.Allow(ctx, "worst")
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed {
				allowed++
			}
		}
		return allowed
	}
	first, second := w-time.Microsecond, 2*w-2*time.Microsecond
	if second-first >= w {
		t.Fatalf("the bursts at %v and %v are not within one window", first, second)
	}
	clock.Set(first)
	if n := burst(limit); n != limit {
		t.Fatalf("first burst: %d allowed, want %d", n, limit)
	}
	clock.Set(second)
	if n := burst(limit); n != limit-1 {
		t.Fatalf("second burst, %v later: %d allowed, want %d", second-first, n, limit-1)
	}
}

// RunPeekResetRefund checks that peeks take nothing, that Reset forgets a
// key, that AllowAll gives back what allowing checks took when another
// refuses, and that invalid costs are errors.
func RunPeekResetRefund(t *testing.T, h Harness) {
	for _, p := range Policies() {
		t.Run(fmt.Sprintf("%v", ruleOf(t, p)), func(t *testing.T) {
			clock := NewClock()
			l := h.NewLimiter(t, p, sluice.WithClock(clock.Now))
			peekAndReset(t, l)
			refundOnRefusal(t, h, l, clock)
			badRequests(t, l)
		})
	}
}

// peekAndReset: a peek takes nothing, sees an exhausted key, and a Reset
// gives the whole limit back.
func peekAndReset(t *testing.T, l *sluice.Limiter) {
	ctx := context.Background()
	limit := l.Rule().Limit
	peeksTakeNothing(t, ctx, l)
	res, err := l.AllowN(ctx, "p", limit)
	if err != nil || !res.Allowed || res.Remaining != 0 {
		t.Fatalf("taking the whole limit: %+v, %v", res, err)
	}
	if res, _ := l.Peek(ctx, "p"); res.Allowed || res.RetryAfter <= 0 {
		t.Fatalf("peek on an exhausted key: %+v", res)
	}
	resetAndPeek(t, ctx, l, "p")
}

// resetAndPeek resets key and checks that Peek then shows the whole limit.
func resetAndPeek(t *testing.T, ctx context.Context, l *sluice.Limiter, key string) {
	if err := l.Reset(ctx, key); err != nil {
		t.Fatal(err)
	}
	if res, _ := l.Peek(ctx, key); !res.Allowed || res.Remaining != l.Rule().Limit {
		t.Fatalf("peek after Reset: %+v", res)
	}
}

// peeksTakeNothing peeks three times at the fresh key "p": each sees the
// whole limit left.
func peeksTakeNothing(t *testing.T, ctx context.Context, l *sluice.Limiter) {
	limit := l.Rule().Limit
	for range 3 {
		res, err := l.Peek(ctx, "p")
		if err != nil || !res.Allowed || res.Remaining != limit {
			t.Fatalf("peek on a fresh key: %+v, %v; want allowed with %d remaining", res, err, limit)
		}
	}
}

// refundOnRefusal: a second limiter with a limit of one refuses the
// second request of AllowAll; l must not be charged for it.
func refundOnRefusal(t *testing.T, h Harness, l *sluice.Limiter, clock *Clock) {
	ctx := context.Background()
	limit := l.Rule().Limit
	gate := h.NewLimiter(t, sluice.FixedWindow{Limit: 1, Window: time.Hour}, sluice.WithClock(clock.Now), sluice.WithName("gate"))
	checks := []sluice.Check{{Limiter: l, Key: "r", Cost: 1}, {Limiter: gate, Key: "r", Cost: 1}}
	d, err := sluice.AllowAll(ctx, checks)
	if err != nil || !d.Allowed {
		t.Fatalf("first AllowAll: %+v, %v", d, err)
	}
	d, err = sluice.AllowAll(ctx, checks)
	if err != nil || d.Allowed || !d.Results[0].Allowed || d.Results[1].Allowed {
		t.Fatalf("second AllowAll: %+v, %v; want refused by the gate only", d, err)
	}
	if d.RetryAfter() <= 0 {
		t.Fatalf("refused Decision has RetryAfter %v", d.RetryAfter())
	}
	if res, _ := l.Peek(ctx, "r"); res.Remaining != limit-1 {
		t.Fatalf("after a refused AllowAll, %d remaining, want %d (the refund is missing)", res.Remaining, limit-1)
	}
}

// badRequests: a negative cost, a cost over the limit and an empty key
// are errors.
func badRequests(t *testing.T, l *sluice.Limiter) {
	ctx := context.Background()
	for _, n := range []int64{-1, l.Rule().Limit + 1} {
		if _, err := l.AllowN(ctx, "p", n); err == nil {
			t.Fatalf("AllowN with cost %d: no error", n)
		}
	}
	if _, err := l.Allow(ctx, ""); err == nil {
		t.Fatal("Allow with an empty key: no error")
	}
}

// RunConcurrency sends twice the limit at one key from many goroutines, on
// the store's own clock: exactly the limit must be allowed.
func RunConcurrency(t *testing.T, h Harness) {
	const limit = 50
	for _, p := range []sluice.Policy{
		sluice.FixedWindow{Limit: limit, Window: time.Hour},
		sluice.SlidingLog{Limit: limit, Window: time.Hour},
		sluice.SlidingWindow{Limit: limit, Window: time.Hour},
		sluice.TokenBucket{Capacity: limit, Rate: 1, Per: time.Hour},
		sluice.GCRA{Rate: 1, Per: time.Hour, Burst: limit},
	} {
		t.Run(fmt.Sprintf("%T", p), func(t *testing.T) {
			l := h.NewLimiter(t, p)
			var allowed atomic.Int64
			var wg sync.WaitGroup
			for range 2 * limit {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := l.Allow(context.Background(), "hot")
					if err != nil {
						t.Error(err)
						return
					}
					if res.Degraded {
						t.Error("degraded decision")
					}
					if res.Allowed {
						allowed.Add(1)
					}
				}()
			}
			wg.Wait()
			if n := allowed.Load(); n != limit {
				t.Fatalf("%d allowed, want exactly %d", n, limit)
			}
		})
	}
}

// RunRealTime exhausts a short limit on the store's own clock, sleeps the
// advertised RetryAfter and expects the next request to be allowed.
func RunRealTime(t *testing.T, h Harness) {
	ctx := context.Background()
	for _, p := range []sluice.Policy{
		sluice.FixedWindow{Limit: 3, Window: 100 * ms},
		sluice.SlidingLog{Limit: 3, Window: 100 * ms},
		sluice.SlidingWindow{Limit: 3, Window: 100 * ms},
		sluice.TokenBucket{Capacity: 3, Rate: 30, Per: time.Second},
		sluice.GCRA{Rate: 30, Per: time.Second, Burst: 3},
	} {
		t.Run(fmt.Sprintf("%T", p), func(t *testing.T) {
			t.Parallel()
			l := h.NewLimiter(t, p)
			sleepRetryAfter(t, ctx, l)
			// Wait blocks until allowed.
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			for range 4 {
				if err := l.Wait(wctx, "k"); err != nil {
					t.Fatalf("Wait: %v", err)
				}
			}
		})
	}
}

// sleepRetryAfter exhausts "k" (within 100 requests), checks that the
// refusal's RetryAfter is within a second, sleeps it, and expects the
// next request to be allowed.
func sleepRetryAfter(t *testing.T, ctx context.Context, l *sluice.Limiter) {
	res := allowUntilRefused(t, ctx, l, "k")
	if res.Allowed || res.RetryAfter <= 0 || res.RetryAfter > time.Second {
		t.Fatalf("refusal %+v", res)
	}
	time.Sleep(res.RetryAfter)
	if res, err := l.Allow(ctx, "k"); err != nil || !res.Allowed {
		t.Fatalf("after sleeping RetryAfter: %+v, %v", res, err)
	}
}

// allowUntilRefused sends requests for key until one is refused, at most
// a hundred, and returns the last Result.
func allowUntilRefused(t *testing.T, ctx context.Context, l *sluice.Limiter, key string) sluice.Result {
	var res sluice.Result
	for i := 0; i < 100; i++ {
		if res = allowN(t, ctx, l, key, 1); !res.Allowed {
			break
		}
	}
	return res
}
