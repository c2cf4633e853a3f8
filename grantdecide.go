package sluice

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// The decisions of a limiter WithGrants (see grants.go).

// AnswerGrant: the process decided against its grant of the key, without
// a call to the store (WithGrants).
const AnswerGrant Answer = 3

// grantAttempts bounds the calls one decision makes: after them it is
// refused (units granted to it were taken by its own concurrent decisions).
const grantAttempts = 3

// allowGrant decides a request of cost n (0 peeks) for key against the
// process's grant of it, calling the store only when the grant cannot
// decide.
func (l *Limiter) allowGrant(ctx context.Context, key string, n int64) (Result, error) {
	g := l.gr
	var buf [192]byte
	k := driver.AppendGrantKey(buf[:0], l.cfg.prefix, l.cfg.name, l.rule, key)
	gk := g.get(k, func() string { return l.storeKey(key) })
	start := time.Now()
	deadline := start.Add(l.cfg.timeout)
	answer := AnswerGrant
	for attempt := 0; ; attempt++ {
		gk.mu.Lock()
		now := g.mono()
		gk.expire(g, now)
		if attempt == 0 {
			gk.count(g, now, n)
		}
		res, ok := gk.local(g, now, n)
		if !ok && attempt == grantAttempts {
			res, ok = Result{Limit: l.rule.Limit, Remaining: gk.unspent, RetryAfter: time.Millisecond}, true
		}
		if ok {
			c, due := gk.renewDue(g, now)
			gk.mu.Unlock()
			if due {
				g.spawn(func() { g.run(gk, c) })
			}
			return l.grantDone(ctx, gk.key, n, res, nil, answer, start), nil
		}
		answer = AnswerStore
		if gk.calling {
			// One call in flight per key: wait for its answer.
			ch := gk.done
			gk.mu.Unlock()
			if err := waitCall(ctx, ch, deadline); err != nil {
				return l.grantFailed(ctx, gk, n, err, start)
			}
			continue
		}
		c := gk.begin(g, now, gk.want(g), max(n, 1)-gk.unspent, false)
		gk.mu.Unlock()
		if err := g.run(gk, c); err != nil {
			return l.grantFailed(ctx, gk, n, err, start)
		}
	}
}

// waitCall waits for a call in flight to end (ch closed), within deadline
// and ctx. A call that has ended answers even when the deadline has passed
// too (select would choose between them at random). Tests that hold the
// background calls (grantHooks.drain) run them first.
func waitCall(ctx context.Context, ch chan struct{}, deadline time.Time) error {
	if grantHooks.drain != nil {
		grantHooks.drain()
	}
	select {
	case <-ch:
		return nil
	default:
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("sluice: grant call in flight past the timeout: %w", context.DeadlineExceeded)
	}
}

// local decides n against gk's units (its lock held): allowed when they
// cover it (a peek: one unit), refused while the store said it had too
// little; ok is false when a call must decide.
func (gk *gkey) local(g *grants, now, n int64) (Result, bool) {
	if gk.unspent >= max(n, 1) {
		gk.unspent -= n
		return Result{Allowed: true, Limit: g.rule.Limit, Remaining: gk.unspent}, true
	}
	if now < gk.refused {
		return Result{Limit: g.rule.Limit, Remaining: gk.unspent, RetryAfter: time.Duration(max(gk.refused-now, 1000))}, true
	}
	return Result{}, false
}

// grantDone completes a decision made against a grant: shadow mode,
// counters and the observer.
func (l *Limiter) grantDone(ctx context.Context, key string, n int64, res Result, err error, answer Answer, start time.Time) Result {
	switch answer {
	case AnswerGrant:
		l.gr.st.local.Add(1)
	case AnswerStore:
		l.gr.st.store.Add(1)
	default:
		l.gr.st.failed.Add(1)
	}
	if !res.Allowed && l.cfg.shadow {
		res.Allowed, res.Shadowed, res.RetryAfter = true, true, 0
	}
	if l.cfg.observer != nil {
		var latency time.Duration
		if answer != AnswerGrant {
			latency = time.Since(start)
		}
		op := driver.Op{Key: key, Rule: l.rule, Cost: n, Err: err}
		l.observe(ctx, &op, res, answer, start, latency)
	}
	return res
}

// grantFailed decides by the fail mode after a call failed: FailShare
// against the process's share, the others as without grants.
func (l *Limiter) grantFailed(ctx context.Context, gk *gkey, n int64, err error, start time.Time) (Result, error) {
	if ctx.Err() != nil {
		return Result{}, fmt.Errorf("sluice: %s: %w", l.cfg.name, ctx.Err())
	}
	var res Result
	if l.gr.share {
		l.logStoreError(err)
		gk.mu.Lock()
		res = gk.shareDecide(l.gr, l.gr.mono(), n)
		gk.mu.Unlock()
	} else {
		res = l.degrade(&driver.Op{Rule: l.rule, Err: err})
	}
	return l.grantDone(ctx, gk.key, n, res, err, AnswerFailMode, start), nil
}

// setShare keeps the process's share of the limit from a call's answer
// (gk's lock held): the units it holds against its fair part, at least 1 /
// holders seen and at most all.
func (gk *gkey) setShare(g *grants, res driver.GrantResult, now int64) {
	h := float64(max(1, res.Holders))
	gk.share = min(1, max(1/h, 2*float64(res.Held)/float64(g.rule.Limit)))
	gk.shareAt = now
	gk.tokAt = 0
}

// shareNow is the share at now: the last one, decaying over a grant's
// life toward 1 / holders seen (1 for a key never answered).
func (gk *gkey) shareNow(g *grants, now int64) float64 {
	floor := 1 / float64(max(1, gk.holders))
	if gk.share == 0 {
		return floor
	}
	return floor + (gk.share-floor)*math.Exp(-float64(now-gk.shareAt)/float64(g.life))
}

// shareDecide decides n while the store is unreachable (FailShare; gk's
// lock held): a bucket at the share of the rate and burst, or the share of
// a window's limit. Degraded, and not exact.
func (gk *gkey) shareDecide(g *grants, now, n int64) Result {
	s := gk.shareNow(g, now)
	r := g.rule
	res := Result{Limit: r.Limit, Degraded: true}
	if r.Algorithm.Rated() {
		burst := max(1, s*float64(r.Limit))
		perNs := s / float64(r.Interval)
		if gk.tokAt == 0 {
			gk.tokens, gk.tokAt = 0, gk.shareAt
		}
		gk.tokens = min(burst, gk.tokens+float64(now-gk.tokAt)*perNs)
		gk.tokAt = now
		if need := float64(max(n, 1)); gk.tokens >= need {
			gk.tokens -= float64(n)
			res.Allowed = true
		} else {
			res.RetryAfter = time.Duration(math.Ceil((need - gk.tokens) / perNs))
		}
		return res
	}
	wall := time.Now()
	if g.clock != nil {
		wall = g.clock()
	}
	ws, we := r.Span(wall)
	if gk.tokAt != ws.UnixNano() {
		gk.tokens, gk.tokAt = 0, ws.UnixNano()
	}
	if gk.tokens+float64(max(n, 1)) <= max(1, math.Floor(s*float64(r.Limit))) {
		gk.tokens += float64(n)
		res.Allowed = true
	} else {
		res.RetryAfter = we.Sub(wall)
	}
	return res
}

// reset is Reset for a limiter with grants: the key's level becomes all
// that is not held (the grants outstanding stay valid until they end), in
// one call after any call in flight.
func (g *grants) reset(ctx context.Context, k []byte, plain string) error {
	gk := g.get(k, func() string { return plain })
	deadline := time.Now().Add(g.timeout)
	for {
		gk.mu.Lock()
		if !gk.calling {
			break
		}
		ch := gk.done
		gk.mu.Unlock()
		if err := waitCall(ctx, ch, deadline); err != nil {
			return err
		}
	}
	now := g.mono()
	gk.expire(g, now)
	c := gk.begin(g, now, 0, 0, false)
	c.op.Reset = true
	gk.refused = 0
	gk.mu.Unlock()
	return g.run(gk, c)
}
