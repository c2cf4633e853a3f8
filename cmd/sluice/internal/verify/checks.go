package verify

import (
	"context"
	"fmt"
	"math/big"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/valkeyops"
	"github.com/sluicehq/sluice/driver"
	"github.com/valkey-io/valkey-go"
)

// clock is a client clock the checks set.
type clock struct{ us atomic.Int64 }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.set(t)
	return c
}
func (c *clock) set(t time.Time)     { c.us.Store(t.UnixMicro()) }
func (c *clock) now() time.Time      { return time.UnixMicro(c.us.Load()) }
func (c *clock) at() time.Time       { return c.now() }
func nowMicro() time.Time            { return time.UnixMicro(time.Now().UnixMicro()) }
func (c *clock) add(d time.Duration) { c.set(c.now().Add(d)) }

// maxSingles is the largest burst sent as single requests; a larger one is
// one request of its whole cost (the same arithmetic: n single units fit
// exactly when a request of n does).
const maxSingles = 10_000

// burst takes n units of key at the limiter's clock time, as single
// requests of cost 1 sent together when n is at most maxSingles, and
// returns how many were allowed. Above maxSingles it asks for want units
// in one request (allowed or not), then one more unit (refused, unless
// want is n): the count is then want, or not.
func (r *run) burst(ctx context.Context, l *sluice.Limiter, at time.Time, key string, n, want int64) (int64, error) {
	if n <= maxSingles {
		return r.singles(ctx, l, at, key, n)
	}
	return wantThenOne(ctx, l, key, n, want)
}

// singles sends n requests of cost 1 on key at at together, in one batch
// on the store, and returns how many were allowed.
func (r *run) singles(ctx context.Context, l *sluice.Limiter, at time.Time, key string, n int64) (int64, error) {
	ops := make([]driver.Op, n)
	for i := range ops {
		ops[i] = driver.Op{Key: driver.Key(r.prefix, l.Name(), l.Rule(), key), Rule: l.Rule(), Cost: 1, Now: at, Deadline: time.Now().Add(checkTimeout)}
	}
	if err := r.store.Do(ctx, ops); err != nil {
		return 0, err
	}
	return countAllowed(ops)
}

// countAllowed returns how many of the decided ops were allowed, or the
// first op's error.
func countAllowed(ops []driver.Op) (int64, error) {
	var allowed int64
	for _, op := range ops {
		if op.Err != nil {
			return 0, op.Err
		}
		if op.Result.Allowed {
			allowed++
		}
	}
	return allowed, nil
}

// wantThenOne stands in for a burst of n above maxSingles: one request
// for want units (none counted when it is refused), then, unless want is
// n, one more unit, which is counted when allowed.
func wantThenOne(ctx context.Context, l *sluice.Limiter, key string, n, want int64) (int64, error) {
	var got int64
	if want > 0 {
		res, err := l.AllowN(ctx, key, want)
		if err != nil || !res.Allowed {
			return 0, err // fewer than want: report it as none fitting the one request
		}
		got = want
	}
	if want >= n {
		return got, nil
	}
	one, err := oneMore(ctx, l, key)
	if err != nil {
		return 0, err
	}
	return got + one, nil
}

// oneMore asks for one unit on key and returns 1 when it is allowed.
func oneMore(ctx context.Context, l *sluice.Limiter, key string) (int64, error) {
	res, err := l.Allow(ctx, key)
	if err != nil || !res.Allowed {
		return 0, err
	}
	return 1, nil
}

// concurrency sends twice the limit at one key in parallel from several
// worker processes. Every decision is at the same instant (a client clock
// frozen for the whole check), so nothing refills meanwhile and exactly the
// limit must be allowed: one more is a lost update. Limits above 2,000 are
// first taken down to 2,000 by one request, so that the parallel part stays
// at 4,000 decisions.
func (r *run) concurrency(ctx context.Context, p *config.Policy, chk *Check) {
	rule, _ := p.Policy.Rule()
	at := nowMicro()
	const key = "concurrency"
	want := min(rule.Limit, 2000)
	pre := rule.Limit - want
	if pre > 0 {
		if err := r.takeFirst(ctx, p, key, at, pre); err != nil {
			chk.fail("%v", err)
			return
		}
		chk.fig("taken_first", float64(pre))
	}
	attempts := 2 * want
	tally, err := r.spawn(ctx, p, job{Identity: key, AtMicro: at.UnixMicro(), Goroutines: r.opts.Goroutines}, attempts)
	r.concurrencyFigures(chk, tally, attempts, want)
	if pre > 0 {
		chk.Detail += fmt.Sprintf(" (after %d of the limit of %d were taken by one request)", pre, rule.Limit)
	}
	if err != nil {
		chk.fail("%v", err)
		return
	}
	checkExactlyWant(chk, tally, attempts, want)
}

// takeFirst takes pre units of key at at in one request, bringing the
// limit down to what the parallel part sends at.
func (r *run) takeFirst(ctx context.Context, p *config.Policy, key string, at time.Time, pre int64) error {
	l, err := r.limiter(p, func() time.Time { return at })
	if err != nil {
		return err
	}
	res, err := l.AllowN(ctx, key, pre)
	if err != nil || !res.Allowed || res.Degraded {
		return fmt.Errorf("taking %d units first: %+v, %v", pre, res, err)
	}
	return nil
}

// concurrencyFigures records the figures and the detail of the
// concurrency check.
func (r *run) concurrencyFigures(chk *Check, got tally, attempts, want int64) {
	chk.fig("allowed", float64(got.Allowed))
	chk.fig("attempted", float64(attempts))
	chk.fig("want", float64(want))
	chk.fig("processes", float64(r.opts.Processes))
	chk.fig("goroutines", float64(r.opts.Goroutines))
	chk.Detail = fmt.Sprintf("%d allowed of %d attempted from %d processes × %d goroutines, want exactly %d",
		got.Allowed, attempts, r.opts.Processes, r.opts.Goroutines, want)
}

// checkExactlyWant fails chk unless exactly want of the attempts were
// allowed, none degraded and none failed.
func checkExactlyWant(chk *Check, got tally, attempts, want int64) {
	if got.Allowed != want {
		chk.fail("%d allowed of %d attempted, want exactly %d: the limit is not enforced atomically", got.Allowed, attempts, want)
	}
	if got.Degraded > 0 || got.Errors > 0 {
		chk.fail("%d decisions degraded and %d failed (first error: %s)", got.Degraded, got.Errors, got.FirstError)
	}
}

// edgeOffsets returns, for rule, how long before and after a window edge
// the two bursts go, and how many units the algorithm promises to allow in
// the second burst. The buckets have no window: their second burst comes
// two and a half intervals after the first, and two units have refilled.
func edgeOffsets(rule sluice.Rule) (delta time.Duration, after int64, what string) {
	switch rule.Algorithm {
	case driver.AlgorithmFixedWindow:
		delta = min(2*time.Millisecond, rule.Window/10).Truncate(time.Microsecond)
		if !rule.Calendar.IsZero() {
			delta = 2 * time.Millisecond
		}
		return delta, rule.Limit, "a new window allows the whole limit again"
	case driver.AlgorithmSlidingLog:
		delta = min(2*time.Millisecond, rule.Window/10).Truncate(time.Microsecond)
		return delta, 0, "the log still holds the whole limit"
	case driver.AlgorithmSlidingWindow:
		// estimate = limit × (W − δ)/W + taken ≤ limit, so floor(limit ×
		// δ/W) units fit. δ puts limit × δ/W half-way between two whole
		// numbers, away from rounding: (j + ½) × W / limit.
		j := rule.Limit / 10
		w := rule.Window.Microseconds()
		d := new(big.Int).Mul(big.NewInt(w), big.NewInt(2*j+1))
		d.Quo(d, big.NewInt(2*rule.Limit))
		us := max(d.Int64(), 1)
		n := new(big.Int).Mul(big.NewInt(rule.Limit), big.NewInt(us))
		n.Quo(n, big.NewInt(w))
		return time.Duration(us) * time.Microsecond, n.Int64(), "the previous window still counts by (W − δ)/W"
	default:
		// The bursts are gap = 2δ apart: 2.5 intervals.
		gap := 2*rule.Interval + rule.Interval/2
		return (gap / 2).Truncate(time.Microsecond), min(rule.Limit, 2), "two units refilled in 2.5 intervals"
	}
}

// boundaries sends a full burst just before a window edge and another just
// after it, on a client clock.
func (r *run) boundaries(ctx context.Context, p *config.Policy, chk *Check) {
	rule, _ := p.Policy.Rule()
	delta, wantAfter, why := edgeOffsets(rule)
	edge := windowEdge(rule, nowMicro())
	clk := newClock(edge.Add(-delta))
	l, err := r.limiter(p, clk.now)
	if err != nil {
		chk.fail("%v", err)
		return
	}
	const key = "boundaries"
	before, err := r.burst(ctx, l, clk.now(), key, rule.Limit, rule.Limit)
	if err != nil {
		chk.fail("burst before the edge: %v", err)
		return
	}
	clk.set(edge.Add(delta))
	after, err := r.burst(ctx, l, clk.now(), key, rule.Limit, wantAfter)
	if err != nil {
		chk.fail("burst after the edge: %v", err)
		return
	}
	edgeVerdict(chk, rule.Limit, delta, edgeBursts{before, after, wantAfter, why})
}

// edgeBursts is what the bursts around a window edge allowed, and what
// the second should allow and why.
type edgeBursts struct {
	before, after, wantAfter int64
	why                      string
}

// edgeVerdict records the figures of the bursts delta before and after a
// window edge of a rule of limit, and fails chk unless the first allowed
// the whole limit and the second what it should.
func edgeVerdict(chk *Check, limit int64, delta time.Duration, b edgeBursts) {
	chk.fig("limit", float64(limit))
	chk.fig("before", float64(b.before))
	chk.fig("after", float64(b.after))
	chk.fig("want_after", float64(b.wantAfter))
	chk.fig("offset_ms", ms(delta))
	chk.Detail = fmt.Sprintf("%d of %d allowed %v before the edge, %d of %d %v after it (want %d: %s)",
		b.before, limit, delta, b.after, limit, delta, b.wantAfter, b.why)
	if b.before != limit {
		chk.fail("%d of %d allowed just before the edge, want all %d", b.before, limit, limit)
	}
	if b.after != b.wantAfter {
		chk.fail("%d of %d allowed just after the edge, want %d (%s)", b.after, limit, b.wantAfter, b.why)
	}
}

// windowEdge is the edge the boundaries check bursts around: the end of
// the calendar period of now, the start of the window after next, or for
// the buckets a second after now.
func windowEdge(rule sluice.Rule, now time.Time) time.Time {
	if !rule.Calendar.IsZero() {
		_, edge := rule.Span(now) // the end of this calendar period
		return edge
	}
	if rule.Window > 0 {
		w := rule.Window.Microseconds()
		return time.UnixMicro((now.UnixMicro()/w + 2) * w)
	}
	return now.Add(time.Second)
}

// realWaitMax is the longest RetryAfter recovery waits for in real time.
const realWaitMax = 2 * time.Second

// recovery exhausts a key, then checks on a client clock that a request at
// the advertised RetryAfter is allowed and one a microsecond earlier is
// not, and finds the instant the key is allowed again by bisection. When
// the RetryAfter is at most 2s it also waits it out on Valkey's own clock.
func (r *run) recovery(ctx context.Context, p *config.Policy, chk *Check) {
	rule, _ := p.Policy.Rule()
	t0 := nowMicro()
	clk := newClock(t0)
	l, err := r.limiter(p, clk.now)
	if err != nil {
		chk.fail("%v", err)
		return
	}
	pr := &recoveryProbe{ctx: ctx, l: l, clk: clk, t0: t0, limit: rule.Limit}
	ra, observed, err := pr.measure(chk)
	if err != nil {
		chk.fail("%v", err)
		return
	}
	if observed != ra {
		chk.fail("RetryAfter advertised %v, but the key is allowed again after %v", ra, observed)
	}
	pr.checkEdge(ra, chk)
	chk.Detail = fmt.Sprintf("retry after %v advertised, %v observed; refused 1µs earlier, allowed at it", ra, observed)
	if ra > realWaitMax {
		chk.Detail += fmt.Sprintf("; no real wait (%v > %v)", ra, realWaitMax)
		return
	}
	r.realRecovery(ctx, p, rule.Limit, chk)
}

// recoveryProbe asks keys of one limiter on a client clock. Every key is
// exhausted the same way at t0, and then only asked later: a sliding log
// with count_rejected logs refusals too, and a sliding log forgets old
// entries when asked, so one key must never be asked twice at different
// times, nor back in time.
type recoveryProbe struct {
	ctx    context.Context
	l      *sluice.Limiter
	clk    *clock
	t0     time.Time
	limit  int64
	probes int
}

// measure exhausts recovery-a and recovery-b, and returns the RetryAfter
// advertised by the refusal of recovery-a, which must be positive, and the
// delay after which a key exhausted alike is observed allowed again; it
// records both figures in chk.
func (pr *recoveryProbe) measure(chk *Check) (ra, observed time.Duration, err error) {
	if ra, err = pr.exhaustBoth(); err != nil {
		return 0, 0, err
	}
	chk.fig("advertised_ms", ms(ra))
	if ra <= 0 {
		return 0, 0, fmt.Errorf("a refusal advertised RetryAfter %v, want positive", ra)
	}
	if observed, err = pr.bisect(ra); err != nil {
		return 0, 0, err
	}
	chk.fig("observed_ms", ms(observed))
	return ra, observed, nil
}

// exhaustBoth exhausts recovery-a and recovery-b, and returns the
// RetryAfter of recovery-a's refusal.
func (pr *recoveryProbe) exhaustBoth() (time.Duration, error) {
	ra, err := pr.exhaust("recovery-a")
	if err != nil {
		return 0, err
	}
	_, err = pr.exhaust("recovery-b")
	return ra, err
}

// exhaust takes the whole limit of a fresh key at t0, checks one more is
// refused, and returns the RetryAfter of that refusal.
func (pr *recoveryProbe) exhaust(key string) (time.Duration, error) {
	pr.clk.set(pr.t0)
	res, err := pr.l.AllowN(pr.ctx, key, pr.limit)
	if err != nil || !res.Allowed || res.Degraded {
		return 0, fmt.Errorf("taking the whole limit on a fresh key: %+v, %v", res, err)
	}
	res, err = pr.l.Allow(pr.ctx, key)
	if err != nil || res.Allowed || res.Degraded {
		return 0, fmt.Errorf("one more after the whole limit: %+v, %v; want refused", res, err)
	}
	return res.RetryAfter, nil
}

// peek reports whether a key exhausted at t0 is allowed d later (a peek
// takes nothing), on a new key each time.
func (pr *recoveryProbe) peek(d time.Duration) (bool, error) {
	pr.probes++
	key := fmt.Sprintf("recovery-probe-%d", pr.probes)
	if _, err := pr.exhaust(key); err != nil {
		return false, err
	}
	pr.clk.set(pr.t0.Add(d))
	res, err := pr.l.Peek(pr.ctx, key)
	return res.Allowed, err
}

// bisect finds, to the microsecond, the instant after a refusal that a
// key is allowed again, searching up to twice the advertised ra and a
// second.
func (pr *recoveryProbe) bisect(ra time.Duration) (time.Duration, error) {
	lo, hi := time.Duration(0), 2*ra+time.Second
	if ok, err := pr.peek(hi); err != nil || !ok {
		return 0, fmt.Errorf("still refused %v after the refusal (advertised %v): %v", hi, ra, err)
	}
	for hi-lo > time.Microsecond {
		mid := (lo + (hi-lo)/2).Truncate(time.Microsecond)
		ok, err := pr.peek(mid)
		if err != nil {
			return 0, fmt.Errorf("peek: %v", err)
		}
		if ok {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, nil
}

// checkEdge checks that recovery-b is refused 1µs before the advertised
// ra and recovery-a allowed at it.
func (pr *recoveryProbe) checkEdge(ra time.Duration, chk *Check) {
	pr.clk.set(pr.t0.Add(ra - time.Microsecond))
	if res, err := pr.l.Allow(pr.ctx, "recovery-b"); err != nil || res.Allowed {
		chk.fail("a request 1µs before the advertised RetryAfter %v: allowed %v, %v; want refused", ra, res.Allowed, err)
	}
	pr.clk.set(pr.t0.Add(ra))
	if res, err := pr.l.Allow(pr.ctx, "recovery-a"); err != nil || !res.Allowed {
		chk.fail("a request at the advertised RetryAfter %v: allowed %v, %v; want allowed", ra, res.Allowed, err)
	}
}

// realRecovery exhausts a key on Valkey's own clock, waits out the
// RetryAfter in real time, and checks the key is allowed again.
func (r *run) realRecovery(ctx context.Context, p *config.Policy, limit int64, chk *Check) {
	rl, err := r.limiter(p, nil)
	if err != nil {
		chk.fail("%v", err)
		return
	}
	res, err := exhaustReal(ctx, rl, limit)
	if err != nil {
		chk.fail("%v", err)
		return
	}
	wait := res.RetryAfter
	if err := sleep(ctx, wait); err != nil {
		chk.fail("%v", err)
		return
	}
	res, err = rl.Allow(ctx, "recovery-real")
	chk.fig("real_wait_ms", ms(wait))
	if err != nil || !res.Allowed {
		chk.fail("after a real wait of the advertised %v: allowed %v, %v; want allowed", wait, res.Allowed, err)
		return
	}
	chk.Detail += fmt.Sprintf("; allowed after a real wait of %v", wait)
}

// exhaustReal takes the whole limit of the key recovery-real on Valkey's
// clock and returns the refusal of one more.
func exhaustReal(ctx context.Context, rl *sluice.Limiter, limit int64) (sluice.Result, error) {
	res, err := rl.AllowN(ctx, "recovery-real", limit)
	if err == nil && res.Allowed {
		res, err = rl.Allow(ctx, "recovery-real")
	}
	if err != nil || res.Allowed || res.Degraded {
		return res, fmt.Errorf("exhausting a key on Valkey's clock: %+v, %v", res, err)
	}
	return res, nil
}

// sleep waits d, or until ctx ends, when it returns ctx's error.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ttl checks that every key the policy's checks wrote expires, within the
// bound of its algorithm.
func (r *run) ttl(ctx context.Context, p *config.Policy, chk *Check) {
	rule, _ := p.Policy.Rule()
	tt := &ttlTally{ctx: ctx, chk: chk, bound: rule.TTL()}
	pattern := valkeyops.Glob(r.prefix+":"+p.Limiter+":") + "*"
	if err := valkeyops.Scan(ctx, r.client, pattern, tt.scanned); err != nil {
		chk.fail("%v", err)
		return
	}
	chk.fig("keys", float64(tt.n))
	chk.fig("longest_ms", ms(tt.longest))
	chk.fig("bound_ms", ms(tt.bound))
	chk.Detail = fmt.Sprintf("%d keys, longest TTL %v, bound %v", tt.n, tt.longest, tt.bound)
	if tt.n == 0 {
		// Keys that never expire would still be here.
		chk.Detail = "every key the checks wrote has expired already"
	}
}

// ttlTally is the ttl check under way: the keys seen and the longest TTL
// among them.
type ttlTally struct {
	ctx     context.Context
	chk     *Check
	bound   time.Duration
	n       int
	longest time.Duration
}

// scanned reads the TTLs of keys, a batch of the scan on node.
func (tt *ttlTally) scanned(node valkey.Client, keys []string) (bool, error) {
	cmds := make(valkey.Commands, len(keys))
	for i, k := range keys {
		cmds[i] = node.B().Pttl().Key(k).Build()
	}
	for i, res := range node.DoMulti(tt.ctx, cmds...) {
		v, err := res.AsInt64()
		if err != nil {
			return false, fmt.Errorf("PTTL %s: %w", keys[i], err)
		}
		tt.add(keys[i], v)
	}
	return true, nil
}

// add counts key, whose PTTL is v, failing the check when it never
// expires or outlives the bound.
func (tt *ttlTally) add(key string, v int64) {
	if v == -2 {
		return // expired meanwhile
	}
	tt.n++
	d := time.Duration(v) * time.Millisecond
	tt.longest = max(tt.longest, d)
	switch {
	case v == -1:
		tt.chk.fail("key %s never expires", key)
	case d > tt.bound:
		tt.chk.fail("key %s expires in %v, longer than its bound %v", key, d, tt.bound)
	}
}
