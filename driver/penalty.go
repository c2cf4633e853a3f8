package driver

import "time"

// For store implementers: penalties (sluice.WithPenalty). A store that
// decides them implements Penalizer beside Store; packages memstore and
// valkeystore do.

// Penalty is a limiter's penalty for repeat offenders: after After
// refusals of a key counted within Within, the key is blocked for Block;
// each further block while the key is remembered doubles the last one,
// up to MaxBlock (0, or equal to Block: every block lasts Block); the
// memory of the blocks (the escalation level) is forgotten once Forgive
// has passed since the last block ended. All durations are whole
// microseconds.
//
// Refusals are counted in a window that opens at the first refusal
// counted and lasts Within: a refusal at or after its end opens a new
// window, counted from one. The After-th refusal in a window starts a
// block (and closes the window). Only refused requests of a positive cost
// count; peeks, refunds and allowed requests do not. A blocked key is
// refused without the algorithm being read or written, and refusals
// during a block neither count nor extend it. A block is in force from
// the refusal that starts it, at t, while the deciding clock is before
// t + its length; the level-th block in a row (level 1 after none or
// after a forgiven one) lasts min(Block × 2^(level−1), MaxBlock). A block
// that starts Forgive or more after the last one ended is level 1 again.
type Penalty struct {
	After    int64
	Within   time.Duration
	Block    time.Duration
	MaxBlock time.Duration
	Forgive  time.Duration
}

// MaxPenaltyAfter is the largest Penalty.After.
const MaxPenaltyAfter = MaxLimit

// IsZero reports whether p is the zero Penalty: none.
func (p Penalty) IsZero() bool { return p == Penalty{} }

// Validate reports whether a store can execute p, naming the field that it
// cannot (as "Penalty.After"): After from 1 to MaxPenaltyAfter, Within and
// Block from MinWindow to MaxWindow in whole microseconds, MaxBlock 0 or
// from Block to MaxWindow, and Forgive positive (up to MaxWindow) exactly
// when MaxBlock exceeds Block: without growth there is nothing to forgive,
// with it the escalation must end.
func (p Penalty) Validate() error {
	if p.After < 1 || p.After > MaxPenaltyAfter {
		return invalidField("Penalty.After", "Penalty.After must be from 1 to %d refusals, got %d", int64(MaxPenaltyAfter), p.After)
	}
	if err := CheckWindow("Penalty.Within", p.Within); err != nil {
		return err
	}
	if err := CheckWindow("Penalty.Block", p.Block); err != nil {
		return err
	}
	if p.MaxBlock != 0 {
		if p.MaxBlock < p.Block {
			return invalidField("Penalty.MaxBlock", "Penalty.MaxBlock must be 0 (no growth) or at least Penalty.Block (%v), got %v", p.Block, p.MaxBlock)
		}
		if err := CheckWindow("Penalty.MaxBlock", p.MaxBlock); err != nil {
			return err
		}
	}
	grows := p.MaxBlock > p.Block
	switch {
	case grows && p.Forgive <= 0:
		return invalidField("Penalty.Forgive", "Penalty.Forgive must be positive when Penalty.MaxBlock (%v) exceeds Penalty.Block (%v): the time after which the escalation is forgotten, got %v", p.MaxBlock, p.Block, p.Forgive)
	case !grows && p.Forgive != 0:
		return invalidField("Penalty.Forgive", "Penalty.Forgive has no effect unless Penalty.MaxBlock exceeds Penalty.Block (every block lasts Block): leave it 0, got %v", p.Forgive)
	case grows:
		return CheckWindow("Penalty.Forgive", p.Forgive)
	}
	return nil
}

// Longest returns the longest block of p: MaxBlock, or Block when MaxBlock
// is 0.
func (p Penalty) Longest() time.Duration { return max(p.Block, p.MaxBlock) }

// BlockAt returns the length of the level-th block in a row (level ≥ 1):
// min(Block × 2^(level−1), Longest()).
func (p Penalty) BlockAt(level int64) time.Duration {
	d := p.Block
	for i := int64(1); i < level && d < p.Longest(); i++ {
		d = min(2*d, p.Longest())
	}
	return d
}

// A Penalizer is a Store that decides Ops carrying a Penalty (Op.Penalty,
// Op.PenaltyKey) in the same atomic step as the decision: it keeps the
// key's penalty state under Op.PenaltyKey, refuses a blocked key without
// running the algorithm, and reports it in Result.Blocked and
// Result.BlockStarted. sluice.New refuses WithPenalty on a store that is
// not one, or whose Penalties reports false.
type Penalizer interface {
	Store
	// Penalties reports whether the store decides penalties (a wrapper
	// answers for the store it wraps).
	Penalties() bool
}

// PenaltyKey returns the store key of identity's penalty state under the
// limiter named name: <prefix>:<name>:pen:{<identity>}, with the same hash
// tag as the identity's counters, so that on a cluster the decision's
// script reads and writes it in the same slot.
func PenaltyKey(prefix, name, identity string) string {
	b := make([]byte, 0, len(prefix)+len(name)+len(identity)+11)
	b = append(b, prefix...)
	b = append(b, ':')
	b = append(b, name...)
	b = append(b, ":pen:{"...)
	b = appendIdentity(b, identity)
	return string(append(b, '}'))
}

// validatePenaltyOp reports whether op's penalty can be executed: a valid
// Penalty with its key, on a rate algorithm; none at all otherwise.
func validatePenaltyOp(op *Op) error {
	if op.Penalty.IsZero() {
		if op.PenaltyKey != "" {
			return invalidField("Op.PenaltyKey", "a penalty key %q without a Penalty", op.PenaltyKey)
		}
		return nil
	}
	if op.Rule.Algorithm == AlgorithmInFlight {
		return invalidField("Op.Penalty", "an in_flight limit takes no Penalty: it limits concurrency, and a refused acquire is not an offence")
	}
	if op.PenaltyKey == "" {
		return invalidField("Op.PenaltyKey", "a Penalty needs its PenaltyKey")
	}
	return op.Penalty.Validate()
}
