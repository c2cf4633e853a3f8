package sluice

import (
	"time"

	"github.com/sluicehq/sluice/driver"
)

// Penalties for repeat offenders (WithPenalty).

// Penalty is a limiter's penalty for repeat offenders (WithPenalty): after
// After refusals of a key within Within, the key is blocked for Block;
// each further block while the key is remembered doubles the last, up to
// MaxBlock (0, or equal to Block: no growth); the escalation is forgotten
// once Forgive has passed since the last block ended. See driver.Penalty
// for the exact rules.
type Penalty = driver.Penalty

// WithPenalty gives the limiter a penalty for repeat offenders: the
// Penalty.After-th refusal of a key within Penalty.Within blocks the key
// for Penalty.Block, and a key blocked again before Penalty.Forgive has
// passed since its last block ended is blocked twice as long as the last
// time, up to Penalty.MaxBlock:
//
//	sluice.WithPenalty(sluice.Penalty{After: 5, Within: time.Minute,
//		Block: time.Minute, MaxBlock: 16 * time.Minute, Forgive: 24 * time.Hour})
//
// blocks a key that is refused 5 times within a minute for 1 minute, then
// 2, 4, 8 and 16 minutes for each further block, until it goes a day
// without one.
//
// The count, the block and its length are decided in the same atomic step
// as the decision, in the store (in the decision key's slot on a Valkey
// Cluster). Refusals are counted in a window that opens at the first one
// counted and lasts Within; only refused requests of a positive cost
// count (not peeks). The refusal that starts a block is answered Blocked
// and BlockStarted. While blocked, every request of the key is refused
// with Result.Blocked, Remaining 0 and RetryAfter and ResetAfter the time
// left of the block, without the policy's algorithm being read or
// written: nothing is counted, and refusals during a block neither count
// nor extend it (as rack-attack's fail2ban, and rate-limiter-flexible's
// blockDuration, which blocks only once per exceeding). When the block
// ends the algorithm decides again, from the state it had, refilled by the
// time passed. Reset lifts a block and forgets the escalation.
//
// The deny cache (WithDenyCache) of such a limiter keeps only blocked
// refusals, until the block's end: other refusals must reach the store to
// be counted.
//
// New refuses an invalid Penalty (naming the field, such as
// "Penalty.After"), a penalty on an InFlight policy (a refused acquire
// is not an offence), with WithReservations, and on a store that does not
// decide penalties (driver.Penalizer: memstore, valkeystore and
// redisstore do).
func WithPenalty(p Penalty) Option {
	return optionFunc(func(c *config) { c.penalty, c.penaltySet = p, true })
}

// checkPenalty refuses a penalty l cannot enforce.
func (l *Limiter) checkPenalty() error {
	c := &l.cfg
	if !c.penaltySet {
		return nil
	}
	if err := c.penalty.Validate(); err != nil {
		return within("WithPenalty", "", err)
	}
	switch {
	case l.rule.Algorithm == driver.AlgorithmInFlight:
		return invalidField("WithPenalty", "WithPenalty: an InFlight policy takes no penalty: it limits concurrency, and a refused acquire is not an offence")
	case c.rsvOn:
		return invalidField("WithPenalty", "WithPenalty: a limiter with reservations (WithReservations) takes no penalty")
	}
	if p, ok := l.store.(driver.Penalizer); !ok || !p.Penalties() {
		return invalidField("WithPenalty", "WithPenalty: store %T does not decide penalties (it does not implement driver.Penalizer)", l.store)
	}
	return nil
}

// penaltyKey returns the store key of key's penalty state, "" without a
// penalty.
func (l *Limiter) penaltyKey(key string) string {
	if !l.cfg.penaltySet {
		return ""
	}
	return driver.PenaltyKey(l.cfg.prefix, l.cfg.name, key)
}

// withPenalty sets op's penalty, for the caller's key.
func (l *Limiter) withPenalty(op *driver.Op, key string) {
	if l.cfg.penaltySet {
		op.Penalty, op.PenaltyKey = l.cfg.penalty, l.penaltyKey(key)
	}
}

// Penalty returns the limiter's penalty (WithPenalty); ok is false when
// it has none.
func (l *Limiter) Penalty() (p Penalty, ok bool) {
	if l.ready() != nil || !l.cfg.penaltySet {
		return Penalty{}, false
	}
	return l.cfg.penalty, true
}

// blockedLater is the deny cache's answer, d after a blocked refusal res:
// still blocked, for any cost, until the block's end; ok is false after.
func blockedLater(res Result, d time.Duration) (Result, bool) {
	if d < 0 || d >= res.RetryAfter {
		return Result{}, false
	}
	later := res
	later.BlockStarted = false
	later.RetryAfter -= d
	later.ResetAfter -= d
	return later, true
}

// cacheRefusal puts op's refusal res in the deny cache, if any. Under a
// penalty only blocks are cached: other refusals must reach the store to
// be counted.
func (l *Limiter) cacheRefusal(op *driver.Op, res *Result, sent int64, seq uint64) {
	if l.deny != nil && op.Cost >= 0 && (res.Blocked || !l.cfg.penaltySet) {
		l.deny.put(l.stableKey(op.Key), op.Cost, *res, sent, seq)
	}
}

// setPenaltyAndReservations checks the penalty (checkPenalty, which
// refuses one with reservations) and resolves WithReservations.
func (l *Limiter) setPenaltyAndReservations() error {
	if err := l.checkPenalty(); err != nil {
		return err
	}
	return l.setReservations()
}
