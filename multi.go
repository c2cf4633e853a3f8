package sluice

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// A Check is one limiter's part of a decision over several limits, such as
// "per API key" and "global", or "per username" and "per address".
type Check struct {
	Limiter *Limiter
	Key     string
	// Cost is the units to take; zero peeks. On an InFlight limiter, 1
	// takes a lease (AllowAll only; see Decision.Leases). In AllowEach, a negative Cost
	// gives units back to a FixedWindow's current window (as Envoy's
	// is_negative_hits asks); its Result is allowed. AllowAll refuses
	// negative costs.
	Cost int64
	// Plan names the limiter's plan to decide under ("" for its policy;
	// see WithPlan). An unknown plan is an error wrapping ErrUnknownPlan.
	Plan string
}

// A Decision is the outcome of AllowAll.
type Decision struct {
	// Allowed reports whether every check allowed the request.
	Allowed bool
	// Results holds one Result per check, in the order of the checks. When
	// the decision is a refusal, the Results of the checks that allowed are
	// those of their first pass (the units they took have been given back).
	Results []Result
	// Leases holds, when the decision is allowed and a check on an
	// InFlight limiter took a lease, one entry per check: that check's
	// lease, nil for the others. Nil when no lease was taken.
	Leases []*Lease
}

// RetryAfter returns the longest RetryAfter among the refusing checks: the
// earliest time the whole request would be allowed, if nothing else is taken
// meanwhile. Zero when allowed.
func (d Decision) RetryAfter() time.Duration {
	return longestRetry(d.Allowed, len(d.Results), func(i int) Result { return d.Results[i] })
}

// longestRetry returns the longest RetryAfter among the n results
// (result(i) is the i-th) that refuse, 0 when the decision is allowed.
func longestRetry(allowed bool, n int, result func(i int) Result) time.Duration {
	var r time.Duration
	if allowed {
		return 0
	}
	for i := range n {
		if res := result(i); !res.Allowed && res.RetryAfter > r {
			r = res.RetryAfter
		}
	}
	return r
}

// AllowAll decides several checks together: the request is allowed only if
// every check allows it. All checks whose limiters share a store go to it in
// one batch (on Valkey, one pipelined round trip). When any check refuses,
// the units taken by the checks that allowed are given back in a second
// batch, so a refused request costs no budget where a refund is exact (see
// below); their Results then report what remains after the refund
// (Remaining and ResetAfter).
//
// Each check is atomic on its own, but the group is not: between the first
// batch and the refund, another request may see the units as taken (it is
// refused when it would have been allowed, never the reverse). A failed
// refund (the store went away in between) leaves those units taken until the
// windows pass; it is logged. A refund gives back exactly what its check
// took, in the window it took it from, or nothing: after the window has
// passed (fixed and sliding window), once the entries have left the log,
// or, for TokenBucket and GCRA, once another request has taken from the
// same key since (docs/guarantees.md, "Refunds"). It never gives back more. So on a
// busy TokenBucket or GCRA key (a global limit) a refused request usually
// keeps its units there; the window algorithms give them back.
//
// Degraded checks follow their limiter's fail mode; shadow-mode checks never
// refuse. Each check has its limiter's timeout.
//
// A check of cost 1 on an InFlight limiter takes a lease: when the
// decision is allowed, Decision.Leases holds it (release it when the work
// is done); when it is refused, the lease is released with the refunds.
func AllowAll(ctx context.Context, checks []Check) (Decision, error) {
	start := time.Now()
	if len(checks) == 1 {
		// A lone check has nothing to give back when it refuses.
		lo := opPool.Get().(*loneOp)
		defer putOp(lo)
		d, err := decideOne(ctx, checks[0], false, lo)
		if err == nil && d.Allowed {
			d.Leases = leasesOf(checks, lo.op[:], d.Results, start)
		}
		return d, err
	}
	d, ops, err := decideEach(ctx, checks, false)
	if err != nil {
		return d, err
	}
	if d.Allowed {
		d.Leases = leasesOf(checks, ops, d.Results, start)
		return d, nil
	}
	// Give back what the allowing checks took. Degraded checks took nothing.
	var refundChecks []Check
	var refunds []driver.Op
	var refunded []int // the index in checks of each refund
	now := time.Now()
	for i, op := range ops {
		if res := d.Results[i]; res.Allowed && !res.Degraded && op.Cost > 0 && !res.Shadowed && op.Receipt != 0 {
			l := checks[i].Limiter
			refundChecks = append(refundChecks, checks[i])
			refunded = append(refunded, i)
			// The refund is decided now (on the limiter's clock, if it has
			// one), and gives back what the take with op's Receipt took.
			r := driver.Op{Key: op.Key, Rule: op.Rule, Cost: -op.Cost, Receipt: op.Receipt, Deadline: now.Add(l.cfg.timeout)}
			if !op.Lease.IsZero() {
				r.Receipt, r.Lease = 0, op.Lease // the release of the lease taken
			}
			if l.cfg.clock != nil {
				r.Now = l.cfg.clock()
			}
			refunds = append(refunds, r)
			if l.deny != nil {
				// A refusal cached before the refund may no longer hold.
				l.deny.forget(op.Key)
			}
		}
	}
	if len(refunds) > 0 {
		storeGroups(ctx, refundChecks, refunds) // errors are recorded per Op
		for i, op := range refunds {
			if op.Err != nil {
				l := refundChecks[i].Limiter
				l.cfg.logger.Warn("sluice: refund failed; the units stay taken until their window passes",
					"limiter", l.cfg.name, "err", op.Err)
				continue
			}
			// What is left once the units are back, not before, and
			// when the limit is full again from there.
			d.Results[refunded[i]].Remaining = op.Result.Remaining
			d.Results[refunded[i]].ResetAfter = op.Result.ResetAfter
		}
	}
	return d, nil
}

// AllowEach decides several checks independently: each takes its cost when
// it allows (under CountRejected, in any case), whatever the others decide,
// and nothing is given back. Decision.Allowed reports whether every check
// allowed. Checks whose limiters share a store go to it in one batch, as in
// AllowAll. Use it where each limit counts its own hits, as Envoy's
// reference rate-limit service does; AllowAll where a refused request must
// cost nothing.
func AllowEach(ctx context.Context, checks []Check) (Decision, error) {
	if len(checks) == 1 {
		lo := opPool.Get().(*loneOp)
		defer putOp(lo)
		return decideOne(ctx, checks[0], true, lo)
	}
	d, _, err := decideEach(ctx, checks, true)
	return d, err
}

// decideOne is decideEach of one check c (the usual call of Envoy's
// service), decided as decideEach decides it, without its slices nor its
// grouping by store: its Op is lo's (the caller's, from opPool; it may
// read the Op until it puts lo back), its key, on a driver.TransientKeys
// store, in lo's buffer, as a lone Limiter.AllowN's.
func decideOne(ctx context.Context, c Check, refunds bool, lo *loneOp) (Decision, error) {
	ops := lo.op[:]
	if err := buildOp(0, c, refunds, &ops[0], lo); err != nil {
		return Decision{}, err
	}
	l := c.Limiter
	start := time.Now()
	sent, seq, err := l.prepare(&ops[0], start)
	if err != nil {
		return Decision{}, err
	}
	if err := storeDo(ctx, l.store, ops); err != nil && ctx.Err() != nil {
		return Decision{}, fmt.Errorf("sluice: %w", ctx.Err())
	}
	d := Decision{Results: make([]Result, 1)}
	if err := l.finish(ctx, ops, d.Results, nil, start, sent, seq); err != nil {
		return Decision{}, err
	}
	d.Allowed = d.Results[0].Allowed
	return d, nil
}

// decideEach runs every check once, in one batch per store; refunds says
// whether negative costs (give-backs) are accepted.
func decideEach(ctx context.Context, checks []Check, refunds bool) (Decision, []driver.Op, error) {
	d := Decision{Results: make([]Result, len(checks))}
	if len(checks) == 0 {
		d.Allowed = true
		return d, nil, nil
	}
	ops := make([]driver.Op, len(checks))
	for i, c := range checks {
		if err := buildOp(i, c, refunds, &ops[i], nil); err != nil {
			return Decision{}, nil, err
		}
	}
	if err := runGrouped(ctx, checks, ops, d.Results); err != nil {
		return Decision{}, nil, err
	}
	d.Allowed = true
	for i := range ops {
		if !d.Results[i].Allowed {
			d.Allowed = false
		}
	}
	return d, ops, nil
}

// buildOp checks check i and builds its Op into op; refunds says whether
// a negative cost (a give-back) is accepted. The Op's key is a string of
// its own, or, with lo (a lone check's pooled Op) on a limiter that passes
// transient keys, in lo's buffer (see opKey).
func buildOp(i int, c Check, refunds bool, op *driver.Op, lo *loneOp) error {
	if err := checkLimiter(i, c); err != nil {
		return err
	}
	l := c.Limiter
	if l.rule.Algorithm == driver.AlgorithmInFlight {
		lop, err := leaseCheck(i, c, refunds)
		if err != nil {
			return err
		}
		*op = lop
		return nil
	}
	cost := c.Cost
	if refunds && cost < 0 {
		if !l.rule.Algorithm.GivesBackUntaken() {
			return &PolicyError{Err: ErrInvalidCost, Field: "Check.Cost",
				Reason: fmt.Sprintf("check %d: a give-back without a take is only for %v, not %v", i, driver.AlgorithmFixedWindow, l.rule.Algorithm)}
		}
		cost = 0 // checked as a peek: a give-back may be of any amount
	}
	rule, ok := l.PlanRule(c.Plan)
	if !ok {
		return fmt.Errorf("%w %q of %s (check %d)", ErrUnknownPlan, c.Plan, l.Name(), i)
	}
	if err := l.check(c.Key, rule, cost); err != nil {
		return err
	}
	*op = driver.Op{Key: l.checkKey(c.Key, lo), Rule: rule, Cost: c.Cost}
	if l.ovs != nil {
		op.Override = l.overrideKey(c.Key)
	}
	l.withPenalty(op, c.Key)
	if c.Cost < 0 {
		// A fixed window gives back from the window of its receipt:
		// the current one.
		t := time.Now()
		if l.cfg.clock != nil {
			t = l.cfg.clock()
		}
		op.Receipt = t.UnixMicro()
	}
	return nil
}

// checkKey is the store key of a check's key: in lo's buffer when lo is
// not nil and the limiter passes transient keys (opKey), else a string of
// its own. The limiter is ready (check).
func (l *Limiter) checkKey(key string, lo *loneOp) string {
	if lo == nil || !l.transient {
		return l.storeKey(key)
	}
	var buf [192]byte
	return l.opKey(lo, driver.AppendKey(buf[:0], l.cfg.prefix, l.cfg.name, l.rule, key))
}

// checkLimiter refuses a check without a limiter, or of a limiter with
// grants, which decides apart from any batch.
func checkLimiter(i int, c Check) error {
	switch {
	case c.Limiter == nil:
		return invalidField("Check.Limiter", "check %d has no limiter", i)
	case c.Limiter.gr != nil:
		return invalidField("Check.Limiter", "check %d: limiter %s decides with grants (WithGrants), which AllowAll and AllowEach do not take: call its AllowN", i, c.Limiter.cfg.name)
	}
	return nil
}

// runGrouped runs ops through their limiters' stores, one batch per store,
// and completes their Results into out as each limiter would.
func runGrouped(ctx context.Context, checks []Check, ops []driver.Op, out []Result) error {
	start := time.Now()
	sent := make([]int64, len(ops))
	seqs := make([]uint64, len(ops))
	for i, c := range checks {
		var err error
		if sent[i], seqs[i], err = c.Limiter.prepare(&ops[i], start); err != nil {
			return err
		}
	}
	if err := storeGroups(ctx, checks, ops); err != nil && ctx.Err() != nil {
		return fmt.Errorf("sluice: %w", ctx.Err())
	}
	for i := range ops {
		if err := checks[i].Limiter.finish(ctx, ops[i:i+1], out[i:i+1], nil, start, sent[i], seqs[i]); err != nil {
			return err
		}
	}
	return nil
}

// prepare readies op, of this limiter, to be sent at start: its deadline,
// and its time on the limiter's clock if it has one (refused when no store
// decides at it). It returns start on the limiter's clock (finish's sent)
// and the deny cache's sequence before the op is sent.
func (l *Limiter) prepare(op *driver.Op, start time.Time) (sent int64, seq uint64, err error) {
	if l.deny != nil {
		seq = l.deny.seq.Load() // before the request is sent
	}
	sent = l.monoAt(start)
	if l.cfg.clock != nil {
		op.Now = l.cfg.clock()
		// Refused before any check takes: none would be given back.
		if err := driver.CheckTime("now", op.Now); err != nil {
			return 0, 0, fmt.Errorf("%w (the clock of limiter %s)", err, l.cfg.name)
		}
	}
	op.Deadline = start.Add(l.cfg.timeout)
	return sent, seq, nil
}

// storeGroups sends ops to their stores, one Do per distinct store, the
// stores in parallel. Errors are recorded on the Ops.
func storeGroups(ctx context.Context, checks []Check, ops []driver.Op) error {
	if oneStore(checks) {
		// The common case (one store for every limiter): the ops go as
		// they are, without grouping or copying them.
		return storeDo(ctx, checks[0].Limiter.store, ops)
	}
	type group struct {
		store driver.Store
		idx   []int
	}
	var groups []group
outer:
	for i, c := range checks {
		for g := range groups {
			if groups[g].store == c.Limiter.store {
				groups[g].idx = append(groups[g].idx, i)
				continue outer
			}
		}
		groups = append(groups, group{store: c.Limiter.store, idx: []int{i}})
	}
	run := func(g group) {
		batch := make([]driver.Op, len(g.idx))
		for j, i := range g.idx {
			batch[j] = ops[i]
		}
		err := g.store.Do(ctx, batch)
		for j, i := range g.idx {
			ops[i] = batch[j]
			if ops[i].Err == nil && err != nil {
				ops[i].Err = err
			}
		}
	}
	if len(groups) == 1 {
		run(groups[0])
	} else {
		done := make(chan struct{}, len(groups))
		for _, g := range groups {
			go func() { run(g); done <- struct{}{} }()
		}
		for range groups {
			<-done
		}
	}
	return ctx.Err()
}

// storeDo sends ops, all of store, in one Do; the store's error is
// recorded on the Ops without one of their own.
func storeDo(ctx context.Context, store driver.Store, ops []driver.Op) error {
	if err := store.Do(ctx, ops); err != nil {
		for i := range ops {
			if ops[i].Err == nil {
				ops[i].Err = err
			}
		}
	}
	return ctx.Err()
}

// oneStore reports whether every check's limiter uses the same store.
func oneStore(checks []Check) bool {
	if len(checks) == 0 {
		return false
	}
	for _, c := range checks[1:] {
		if c.Limiter.store != checks[0].Limiter.store {
			return false
		}
	}
	return true
}
