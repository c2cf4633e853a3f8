package sluice

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// Reservations: for work priced after it is done (the tokens an LLM call
// consumed, the bytes a download sent), Reserve takes an estimate from the
// limit, or refuses and takes nothing, exactly as AllowN; Settle finishes
// the reservation with the real amount, from any process: the difference
// is given back when less, the excess charged when more. See
// docs/reservations.md.

var (
	// ErrNoReservations is returned by Reserve and Settle on a limiter
	// made without WithReservations.
	ErrNoReservations = errors.New("sluice: limiter not made WithReservations")
	// ErrInvalidReservation is returned by Settle for a reservation id
	// that is not one Reserve returns (malformed or empty).
	ErrInvalidReservation = errors.New("sluice: invalid reservation id")
	// ErrUnknownReservation is returned by Settle for a well-formed id
	// with no reservation under it for this limiter and key: never made,
	// made for another key or limiter, or expired (ReserveOptions.Life).
	// Nothing was charged or given back.
	ErrUnknownReservation = errors.New("sluice: unknown reservation")
)

// DefaultReservationLife is how long a reservation's record is kept when
// ReserveOptions.Life is zero: a reservation is settled within it, or
// never (it then stays charged at its estimate), and a second settle
// within it answers "already settled".
const DefaultReservationLife = time.Hour

// NoDebt, as ReserveOptions.MaxDebt, allows no debt: an excess is charged
// only up to the limit.
const NoDebt = -1

// ReserveOptions configures a limiter's reservations (WithReservations).
type ReserveOptions struct {
	// MaxDebt bounds the debt an excess may leave, in units beyond the
	// limit: a TokenBucket's or GCRA's credit goes at most MaxDebt units
	// below empty, a FixedWindow's count at most MaxDebt above the limit.
	// An excess beyond the bound is charged up to it and the rest reported
	// (Settlement.Unpaid). 0 means the default, the policy's limit (one
	// whole limit of debt; for TokenBucket and GCRA, less where the time
	// to earn limit + debt back would pass MaxWindow); NoDebt allows none.
	MaxDebt int64
	// Life is how long a reservation's record is kept, a whole number of
	// milliseconds up to MaxWindow; 0 means DefaultReservationLife.
	Life time.Duration
}

// WithReservations lets the limiter Reserve and Settle. New refuses it,
// with the reason, for an algorithm that cannot settle exactly
// (SlidingLog, SlidingWindow) and for a store that keeps no reservations
// (one that does not implement Reserver).
func WithReservations(o ReserveOptions) Option {
	return optionFunc(func(c *config) { c.rsvOn, c.rsv = true, o })
}

// reservations is a limiter's resolved ReserveOptions.
type reservations struct {
	maxDebt int64 // units, >= 0
	life    time.Duration
	store   driver.Reserver
}

// setReservations resolves WithReservations, refusing what cannot be
// settled exactly.
func (l *Limiter) setReservations() error {
	if !l.cfg.rsvOn {
		return nil
	}
	o := l.cfg.rsv
	st, ok := l.store.(driver.Reserver)
	if !ok {
		return invalidField("WithReservations", "WithReservations: store %T keeps no reservations (it does not implement Reserver)", l.store)
	}
	if err := reservable(l.rule); err != nil {
		return err
	}
	r := &reservations{maxDebt: o.MaxDebt, life: o.Life, store: st}
	switch {
	case o.MaxDebt == 0:
		r.maxDebt = l.rule.Limit
	case o.MaxDebt == NoDebt:
		r.maxDebt = 0
	case o.MaxDebt < 0:
		return invalidField("ReserveOptions.MaxDebt", "MaxDebt must be positive, 0 (the default: the limit) or NoDebt, got %d", o.MaxDebt)
	}
	if r.life == 0 {
		r.life = DefaultReservationLife
	}
	if r.life < time.Millisecond || r.life%time.Millisecond != 0 || r.life > driver.MaxWindow {
		return invalidField("ReserveOptions.Life", "Life must be a whole number of milliseconds from 1ms to driver.MaxWindow (%v), got %v", driver.MaxWindow, r.life)
	}
	rules := []Rule{l.rule}
	for _, p := range l.plans {
		rules = append(rules, p)
	}
	for _, rule := range rules {
		if o.MaxDebt == 0 && rule.Algorithm.Rated() {
			// The default stays within what a key's time to live allows.
			r.maxDebt = max(0, min(r.maxDebt, int64(driver.MaxWindow/rule.Interval)-rule.Limit))
		}
	}
	for _, rule := range rules {
		if err := debtFits(rule, r.maxDebt); err != nil {
			return err
		}
	}
	l.rsv = r
	return nil
}

// reservable reports why rule cannot settle exactly, or nil.
func reservable(rule Rule) error {
	switch rule.Algorithm {
	case driver.AlgorithmFixedWindow, driver.AlgorithmTokenBucket, driver.AlgorithmGCRA:
		return nil
	case driver.AlgorithmSlidingLog:
		return invalidField("WithReservations", "WithReservations: %v cannot settle exactly: it keeps one entry per unit, at most its limit, so it could not hold the excess of a settle beyond the limit (use TokenBucket, GCRA or FixedWindow)", rule.Algorithm)
	case driver.AlgorithmSlidingWindow:
		return invalidField("WithReservations", "WithReservations: %v cannot settle exactly: its estimate weights the previous window's count by a float that a settle across the window edge would round (use TokenBucket, GCRA or FixedWindow)", rule.Algorithm)
	case driver.AlgorithmInFlight:
		return invalidField("WithReservations", "WithReservations: %v limits how many things run at once, not how many units are spent: there is no estimate to settle; hold a lease (Acquire, then Release) for the work's lifetime instead", rule.Algorithm)
	}
	return invalidField("WithReservations", "WithReservations: unknown algorithm %v", rule.Algorithm)
}

// debtFits checks that the largest debt keeps a key's state exact and its
// time to live within MaxWindow.
func debtFits(rule Rule, maxDebt int64) error {
	if rule.Algorithm.Rated() {
		if maxDebt > driver.MaxLimit || time.Duration(rule.Limit+maxDebt) > driver.MaxWindow/rule.Interval {
			return invalidField("ReserveOptions.MaxDebt", "(limit + MaxDebt) × interval (%d × %v) must be at most MaxWindow (%v): the time to earn the debt back is a key's time to live",
				rule.Limit+maxDebt, rule.Interval, driver.MaxWindow)
		}
		return nil
	}
	if maxDebt > driver.MaxLimit {
		return invalidField("ReserveOptions.MaxDebt", "MaxDebt must be at most driver.MaxLimit (%d), got %d", int64(driver.MaxLimit), maxDebt)
	}
	return nil
}

// MaxDebt returns the largest debt the limiter's reservations may leave,
// in units beyond the limit (0 when none or without WithReservations).
func (l *Limiter) MaxDebt() int64 {
	if l.ready() != nil || l.rsv == nil {
		return 0
	}
	return l.rsv.maxDebt
}

// Reservations reports whether the limiter was made WithReservations.
func (l *Limiter) Reservations() bool { return l.ready() == nil && l.rsv != nil }

// A Reservation is the outcome of Reserve: the decision of the estimate,
// as AllowN's Result, and when allowed the id to settle it by.
type Reservation struct {
	Result
	// ID is the reservation's id, an opaque string of 23 characters
	// (128 random bits), "" when refused. Pass it to Settle, in this
	// process or another.
	ID       string
	Estimate int64

	limiter *Limiter
	key     string
	plan    string
}

// Limiter returns the limiter r was made by (for SettleCheck).
func (r Reservation) Limiter() *Limiter { return r.limiter }

// Settle settles r with the real amount: Limiter.Settle of r's key and id.
func (r Reservation) Settle(ctx context.Context, actual int64) (Settlement, error) {
	if r.ID == "" {
		return Settlement{}, fmt.Errorf("%w: the reservation was refused, so there is nothing to settle", ErrInvalidReservation)
	}
	return r.limiter.settle(ctx, r.key, r.plan, r.ID, actual)
}

// A Settlement is the outcome of Settle.
type Settlement struct {
	// Settled is true when this call settled the reservation, false when
	// it was settled before (nothing changed).
	Settled bool
	// Estimate and Actual are the reservation's estimate and the amount
	// settled.
	Estimate, Actual int64
	// Charged is the excess (Actual - Estimate, when more) charged;
	// Unpaid the rest of it, beyond the debt bound (MaxDebt), not charged.
	Charged, Unpaid int64
	// Debt is the units owed beyond the limit after the settle, 0 when
	// none (rounded up to a whole unit for TokenBucket and GCRA).
	Debt int64
	// Limit, Remaining, RetryAfter (for one unit) and ResetAfter are as
	// in Result, after the settle.
	Limit      int64
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration
	// Degraded reports a reservation the fail mode allowed without the
	// store (or one shadow mode allowed): it took nothing, and settling it
	// changes nothing, without the store.
	Degraded bool
	// Err is, in SettleAll, this settle's error (see Limiter.Settle); nil
	// in Limiter.Settle, which returns it.
	Err error
}

// Reserve takes estimate units from key's limit, or refuses and takes
// nothing, exactly as AllowN(ctx, key, estimate) decides (its Result, the
// same errors, the fail mode: a degraded reservation has an ID and settles
// without the store). When allowed, the reservation's ID settles it with
// the real amount (Settle), from any process; a reservation never settled
// stays charged at its estimate, and its record expires after
// ReserveOptions.Life.
func (l *Limiter) Reserve(ctx context.Context, key string, estimate int64) (Reservation, error) {
	d, err := ReserveAll(ctx, []Check{{Limiter: l, Key: key, Cost: estimate}})
	if err != nil {
		return Reservation{}, err
	}
	return d.Reservations[0], nil
}

// Settle finishes the reservation id of key with the real amount actual:
//
//   - less than the estimate: the difference is given back, exactly (a
//     TokenBucket or GCRA never holds more than its limit; a FixedWindow
//     gives back while the reservation's window lasts, after which its
//     count no longer limits anything);
//   - more: the excess is charged, never forgiven: a TokenBucket's or
//     GCRA's credit goes below empty (later requests wait until it is
//     earned back, RetryAfter exactly), a FixedWindow's count of the
//     current window past its limit; up to MaxDebt beyond the limit, the
//     rest reported as Unpaid.
//
// Settling is idempotent: a second settle of the same reservation, from any
// process, changes nothing and reports Settled false. A well-formed id
// with no reservation under it (another key's, or expired) is an error
// wrapping ErrUnknownReservation and changes nothing; a malformed one
// wraps ErrInvalidReservation; an actual below 0 or above MaxSettle wraps
// ErrInvalidCost. When the store cannot be reached the error wraps
// ErrStoreUnavailable and the settle may or may not have happened: settle
// again (it counts once).
func (l *Limiter) Settle(ctx context.Context, key, id string, actual int64) (Settlement, error) {
	return l.settle(ctx, key, "", id, actual)
}

func (l *Limiter) settle(ctx context.Context, key, plan, id string, actual int64) (Settlement, error) {
	out, err := SettleAll(ctx, []SettleCheck{{Limiter: l, Key: key, Plan: plan, Reservation: id, Actual: actual}})
	if err != nil {
		return Settlement{}, err
	}
	s := out[0]
	err, s.Err = s.Err, nil
	return s, err
}

// A SettleCheck is one reservation to settle in SettleAll.
type SettleCheck struct {
	Limiter     *Limiter
	Key         string
	Plan        string // the plan the reservation was made under ("" for the policy)
	Reservation string // the reservation's ID
	Actual      int64
}

// A ReserveDecision is the outcome of ReserveAll.
type ReserveDecision struct {
	// Allowed reports whether every check allowed its estimate.
	Allowed bool
	// Reservations holds one Reservation per check, in order. When the
	// decision is a refusal, none has an ID: what the allowing checks took
	// was given back (their Results then report what remains after that).
	Reservations []Reservation
}

// RetryAfter returns the longest RetryAfter among the refusing checks (0
// when allowed).
func (d ReserveDecision) RetryAfter() time.Duration {
	return longestRetry(d.Allowed, len(d.Reservations), func(i int) Result { return d.Reservations[i].Result })
}

// ReserveAll reserves several limits together, such as requests per minute
// (cost 1) and tokens per minute (cost the estimate): each check's Cost is
// its estimate. The request is allowed only if every check allows; when
// any refuses, the reservations of those that allowed are settled at 0 at
// once, which gives their estimates back exactly (a FixedWindow's across
// a window edge excepted, where the window that held them has passed), so
// a refusal by any takes nothing from the others. Settle the reservations
// of an allowed decision together with SettleAll. Every check's limiter
// must be made WithReservations.
func ReserveAll(ctx context.Context, checks []Check) (ReserveDecision, error) {
	d := ReserveDecision{Reservations: make([]Reservation, len(checks))}
	ops := make([]driver.ReserveOp, len(checks))
	for i, c := range checks {
		op, r, err := reserveOp(i, c)
		if err != nil {
			return ReserveDecision{}, err
		}
		ops[i], d.Reservations[i] = op, r
	}
	if len(checks) == 0 {
		d.Allowed = true
		return d, nil
	}
	start := time.Now()
	sent, seqs, err := stampReserveOps(checks, ops, start)
	if err != nil {
		return ReserveDecision{}, err
	}
	sendReserves(ctx, checks, ops)
	back, backIdx, err := finishReserves(ctx, checks, ops, &d, start, sent, seqs)
	if err != nil || d.Allowed {
		return d, err
	}
	if err := giveBack(ctx, &d, back, backIdx); err != nil {
		return ReserveDecision{}, err
	}
	return d, nil
}

// reserveOp validates check i and builds its store operation and its
// Reservation (with a fresh recorded id).
func reserveOp(i int, c Check) (driver.ReserveOp, Reservation, error) {
	l := c.Limiter
	if err := reservingLimiter(l, "Check.Limiter", "check", i); err != nil {
		return driver.ReserveOp{}, Reservation{}, err
	}
	rule, err := reservingRule(l, c.Plan, "check", i)
	if err != nil {
		return driver.ReserveOp{}, Reservation{}, err
	}
	if err := l.check(c.Key, rule, c.Cost); err != nil {
		return driver.ReserveOp{}, Reservation{}, err
	}
	id, err := newReservationID('r')
	if err != nil {
		return driver.ReserveOp{}, Reservation{}, err
	}
	k := l.storeKey(c.Key)
	op := driver.ReserveOp{Op: driver.Op{Key: k, Rule: rule, Cost: c.Cost}, Record: driver.ReservationKey(k, id), Life: l.rsv.life}
	if l.ovs != nil {
		op.Override = l.overrideKey(c.Key)
	}
	return op, Reservation{ID: id, Estimate: c.Cost, limiter: l, key: c.Key, plan: c.Plan}, nil
}

// reservingLimiter checks that l, of item i (a "check" or a "settle";
// field names it), is a ready limiter made WithReservations.
func reservingLimiter(l *Limiter, field, item string, i int) error {
	if l == nil {
		return invalidField(field, "%s %d has no limiter", item, i)
	}
	if err := l.ready(); err != nil {
		return err
	}
	if l.rsv == nil {
		return fmt.Errorf("%w: %s (%s %d)", ErrNoReservations, l.cfg.name, item, i)
	}
	return nil
}

// reservingRule returns the rule of l's plan, of item i (a "check" or a
// "settle"), or an error wrapping ErrUnknownPlan.
func reservingRule(l *Limiter, plan, item string, i int) (Rule, error) {
	rule, ok := l.PlanRule(plan)
	if !ok {
		return Rule{}, fmt.Errorf("%w %q of %s (%s %d)", ErrUnknownPlan, plan, l.Name(), item, i)
	}
	return rule, nil
}

// stampReserveOps sets each op's time (the limiter's clock, if it has one)
// and deadline, and returns each check's send time and deny-cache sequence.
func stampReserveOps(checks []Check, ops []driver.ReserveOp, start time.Time) (sent []int64, seqs []uint64, err error) {
	sent = make([]int64, len(ops))
	seqs = make([]uint64, len(ops))
	for i, c := range checks {
		l := c.Limiter
		if l.deny != nil {
			seqs[i] = l.deny.seq.Load()
		}
		sent[i] = l.monoAt(start)
		if ops[i].Now, err = limiterNow(l); err != nil {
			return nil, nil, err
		}
		ops[i].Deadline = start.Add(l.cfg.timeout)
	}
	return sent, seqs, nil
}

// limiterNow returns the time of l's clock, checked, or the zero time
// (the store's time) when it has none.
func limiterNow(l *Limiter) (time.Time, error) {
	if l.cfg.clock == nil {
		return time.Time{}, nil
	}
	now := l.cfg.clock()
	if err := driver.CheckTime("now", now); err != nil {
		return time.Time{}, fmt.Errorf("%w (the clock of limiter %s)", err, l.cfg.name)
	}
	return now, nil
}

// sendReserves sends ops, one batch per store, and records a batch's error
// on each of its ops that has none of its own.
func sendReserves(ctx context.Context, checks []Check, ops []driver.ReserveOp) {
	byStore(len(checks), func(i int) driver.Reserver { return checks[i].Limiter.rsv.store }, func(st driver.Reserver, idx []int) {
		batch := make([]driver.ReserveOp, len(idx))
		for j, i := range idx {
			batch[j] = ops[i]
		}
		err := st.Reserve(ctx, batch)
		for j, i := range idx {
			ops[i] = batch[j]
			if ops[i].Err == nil && err != nil {
				ops[i].Err = err
			}
		}
	})
}

// finishReserves decides each check from its op's outcome (fail mode,
// shadow mode, deny cache, as AllowN), sets d.Allowed, and returns the
// reservations the store took, to give back if the decision refuses.
func finishReserves(ctx context.Context, checks []Check, ops []driver.ReserveOp, d *ReserveDecision, start time.Time, sent []int64, seqs []uint64) (back []SettleCheck, backIdx []int, err error) {
	d.Allowed = true
	for i, c := range checks {
		l := c.Limiter
		one := []driver.Op{ops[i].Op}
		inStore := one[0].Err == nil && one[0].Result.Allowed // the store took and wrote the record
		var res [1]Result
		if err := l.finish(ctx, one, res[:], nil, start, sent[i], seqs[i]); err != nil {
			return nil, nil, err
		}
		r := &d.Reservations[i]
		r.Result = res[0]
		switch {
		case !r.Result.Allowed:
			r.ID = ""
			d.Allowed = false
		case !inStore:
			// Degraded, or a refusal shadow mode allowed: nothing taken,
			// nothing recorded; it settles without the store.
			r.ID = "l" + r.ID[1:]
		default:
			back = append(back, SettleCheck{Limiter: l, Key: c.Key, Plan: c.Plan, Reservation: r.ID})
			backIdx = append(backIdx, i)
		}
	}
	return back, backIdx, nil
}

// giveBack settles at 0 what the allowing checks of a refused decision
// took (back, of the checks backIdx), updates their Results, and clears
// every reservation's id.
func giveBack(ctx context.Context, d *ReserveDecision, back []SettleCheck, backIdx []int) error {
	out, err := SettleAll(ctx, back)
	if err != nil {
		return err
	}
	for j, s := range out {
		r := &d.Reservations[backIdx[j]]
		if s.Err != nil {
			l := back[j].Limiter
			l.cfg.logger.Warn("sluice: giving back a refused reservation failed; its estimate stays taken",
				"limiter", l.cfg.name, "err", s.Err)
		} else {
			r.Remaining, r.ResetAfter = s.Remaining, s.ResetAfter
		}
	}
	for i := range d.Reservations {
		d.Reservations[i].ID = ""
	}
	return nil
}

// SettleAll settles several reservations, in one batch per store (on
// Valkey, one script call per reservation, those of one node in one round
// trip). It returns one Settlement per check, in order, each with its own
// error (Settlement.Err, as Limiter.Settle would return it); the error
// returned is for invalid input, before anything is sent, or ctx's end.
func SettleAll(ctx context.Context, checks []SettleCheck) ([]Settlement, error) {
	out := make([]Settlement, len(checks))
	ops := make([]driver.SettleOp, len(checks))
	var send []int
	now := time.Now()
	for i, c := range checks {
		local, err := settleOp(i, c, now, &ops[i], &out[i])
		if err != nil {
			return nil, err
		}
		if !local {
			send = append(send, i)
		}
	}
	sendSettles(ctx, checks, ops, send)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sluice: %w", err)
	}
	for _, i := range send {
		settled(&ops[i], &out[i], checks[i])
	}
	return out, nil
}

// settleOp validates settle i, sets its Settlement's first fields and
// builds its store operation; it reports a local reservation (degraded or
// shadowed), which settles without the store.
func settleOp(i int, c SettleCheck, now time.Time, op *driver.SettleOp, s *Settlement) (local bool, err error) {
	l := c.Limiter
	if err := reservingLimiter(l, "SettleCheck.Limiter", "settle", i); err != nil {
		return false, err
	}
	if c.Key == "" {
		return false, ErrInvalidKey
	}
	if c.Actual < 0 || c.Actual > driver.MaxSettle {
		return false, &PolicyError{Err: ErrInvalidCost, Field: "Actual", Reason: fmt.Sprintf("actual %d is outside 0 to driver.MaxSettle (%d)", c.Actual, int64(driver.MaxSettle))}
	}
	kind, ok := parseReservationID(c.Reservation)
	if !ok {
		return false, fmt.Errorf("%w: %q (settle %d)", ErrInvalidReservation, clip(c.Reservation), i)
	}
	rule, err := reservingRule(l, c.Plan, "settle", i)
	if err != nil {
		return false, err
	}
	*s = Settlement{Actual: c.Actual, Limit: rule.Limit}
	if kind == 'l' {
		s.Settled, s.Degraded, s.Remaining = true, true, rule.Limit
		return true, nil
	}
	k := l.storeKey(c.Key)
	*op = driver.SettleOp{Key: k, Rule: rule, Record: driver.ReservationKey(k, c.Reservation), Actual: c.Actual,
		MaxDebt: l.rsv.maxDebt, Deadline: now.Add(l.cfg.timeout)}
	if l.ovs != nil {
		op.Override = l.overrideKey(c.Key)
	}
	op.Now, err = limiterNow(l)
	return false, err
}

// sendSettles sends the ops of the checks send, one batch per store, and
// records a batch's error on each of its ops that has none of its own.
func sendSettles(ctx context.Context, checks []SettleCheck, ops []driver.SettleOp, send []int) {
	byStore(len(send), func(j int) driver.Reserver { return checks[send[j]].Limiter.rsv.store }, func(st driver.Reserver, idx []int) {
		batch := make([]driver.SettleOp, len(idx))
		for j, i := range idx {
			batch[j] = ops[send[i]]
		}
		err := st.Settle(ctx, batch)
		for j, i := range idx {
			ops[send[i]] = batch[j]
			if batch[j].Err == nil && err != nil {
				ops[send[i]].Err = err
			}
		}
	})
}

// settled fills s from the outcome of c's sent op: its error, or what the
// store settled (forgetting a cached refusal a give-back may have undone,
// and warning of an excess beyond the debt bound).
func settled(op *driver.SettleOp, s *Settlement, c SettleCheck) {
	l := c.Limiter
	if op.Err != nil {
		if errors.Is(op.Err, ErrInvalidTime) {
			s.Err = fmt.Errorf("%w (the clock of limiter %s)", op.Err, l.cfg.name)
		} else {
			s.Err = fmt.Errorf("%w: settle %s: %w", ErrStoreUnavailable, l.cfg.name, op.Err)
		}
		return
	}
	r := op.Result
	switch r.Status {
	case driver.SettleUnknown:
		s.Err = fmt.Errorf("%w: %s of %s", ErrUnknownReservation, c.Reservation, l.cfg.name)
		return
	case driver.SettleDone:
		s.Settled = true
		if excess := op.Actual - r.Estimate; excess > 0 {
			s.Charged, s.Unpaid = r.Charged, excess-r.Charged
		}
		if l.deny != nil && op.Actual < r.Estimate {
			// A refusal cached before the give-back may no longer hold.
			l.deny.forget(op.Key)
		}
	}
	s.Estimate, s.Debt = r.Estimate, r.Debt
	s.Remaining, s.RetryAfter, s.ResetAfter = r.Remaining, r.RetryAfter, r.ResetAfter
	if s.Unpaid > 0 {
		l.cfg.logger.Warn("sluice: a settle's excess is beyond the debt bound; the rest is not charged",
			"limiter", l.cfg.name, "unpaid", s.Unpaid, "max_debt", l.rsv.maxDebt)
	}
}

// byStore calls run once per distinct store among the n items (store(i)
// is item i's), with the indices of its items, the stores in parallel.
func byStore(n int, store func(i int) driver.Reserver, run func(st driver.Reserver, idx []int)) {
	type group struct {
		st  driver.Reserver
		idx []int
	}
	var groups []group
outer:
	for i := range n {
		s := store(i)
		for g := range groups {
			if groups[g].st == s {
				groups[g].idx = append(groups[g].idx, i)
				continue outer
			}
		}
		groups = append(groups, group{st: s, idx: []int{i}})
	}
	if len(groups) == 1 {
		run(groups[0].st, groups[0].idx)
		return
	}
	done := make(chan struct{}, len(groups))
	for _, g := range groups {
		go func() { run(g.st, g.idx); done <- struct{}{} }()
	}
	for range groups {
		<-done
	}
}

// A reservation id is a kind ('r': recorded in the store; 'l': local, a
// degraded or shadowed reservation that took nothing) and 128 random bits
// in unpadded base64url: 23 characters.
const reservationIDLen = 23

func newReservationID(kind byte) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("sluice: reservation id: %w", err)
	}
	return string(kind) + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// parseReservationID returns the kind of a well-formed id.
func parseReservationID(id string) (byte, bool) {
	if len(id) != reservationIDLen || id[0] != 'r' && id[0] != 'l' {
		return 0, false
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(id[1:])
	if err != nil || len(b) != 16 {
		return 0, false
	}
	return id[0], true
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
