package driver

import (
	"context"
	"time"
)

// For store implementers: reservations (Limiter.Reserve, Settle). A store
// that keeps them implements Reserver beside Store; package memstore and
// package valkeystore do.

// A Reserver is a Store that keeps reservations: a take of an estimate
// recorded under an id (Reserve), finished later, from any process, by the
// real amount (Settle).
type Reserver interface {
	// Reserve decides every ReserveOp as Do decides its Op (the take of
	// the estimate, Op.Cost) and, in the same atomic step, when the take
	// is allowed, writes the reservation's record under Record: the
	// estimate and the take's Receipt, not settled, kept for Life. A
	// refused take writes no record.
	Reserve(ctx context.Context, batch []ReserveOp) error
	// Settle finishes every SettleOp: in one atomic step it reads the
	// record under Record, and when it is there and not yet settled,
	// applies Actual against the estimate to the key's state (see
	// Limiter.Settle) and marks the record settled, keeping its time to
	// live. A record already settled changes nothing (SettleAlready); a
	// record missing (never made, another key's, or expired) changes
	// nothing (SettleUnknown). Errors are per Op, as for Do.
	Settle(ctx context.Context, batch []SettleOp) error
}

// A ReserveOp is one reservation for a Reserver: the take of the
// estimate and where its record goes.
type ReserveOp struct {
	Op            // the take: Op.Cost is the estimate; Result, Receipt and Err are filled in
	Record string // the store key of the reservation's record (ReservationKey)
	// Life is how long the record is kept: a whole number of
	// milliseconds, at least one.
	Life time.Duration
}

// A SettleOp finishes one reservation for a Reserver.
type SettleOp struct {
	// Key, Rule, Override, Now and Deadline are as in Op: the key the
	// reservation took from and the rule (or plan) it was taken under.
	Key      string
	Rule     Rule
	Override string
	Now      time.Time
	Deadline time.Time
	// Record is the store key of the reservation's record.
	Record string
	// Actual is the real amount, 0 to MaxSettle.
	Actual int64
	// MaxDebt is the largest debt, in units beyond the limit, that an
	// excess may leave (see ReserveOptions.MaxDebt); 0 for none.
	MaxDebt int64

	// Result is filled in by the store.
	Result SettleResult
	// Err is the store's error for this Op, if any.
	Err error
}

// SettleStatus says what a settle found.
type SettleStatus uint8

// The outcomes of a settle.
const (
	// SettleUnknown: no record under the id for this key: never made,
	// made for another key or limiter, or expired (see
	// ReserveOptions.Life). Nothing changed.
	SettleUnknown SettleStatus = iota
	// SettleDone: the reservation was settled by this call.
	SettleDone
	// SettleAlready: the reservation was settled before. Nothing changed.
	SettleAlready
)

// String returns "unknown", "settled" or "already settled".
func (s SettleStatus) String() string {
	switch s {
	case SettleDone:
		return "settled"
	case SettleAlready:
		return "already settled"
	}
	return "unknown"
}

// SettleResult is what a store reports of a settle: the key's state after
// it (for SettleAlready and SettleUnknown, as it is, unchanged).
type SettleResult struct {
	Status SettleStatus
	// Estimate is the reservation's estimate, read from its record (0 for
	// SettleUnknown).
	Estimate int64
	// Charged is the part of the excess (Actual beyond Estimate) charged:
	// all of it unless the debt bound stopped it.
	Charged int64
	// Remaining, RetryAfter (for one unit) and ResetAfter are as in
	// Result, after the settle.
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration
	// Debt is the units owed beyond the limit after the settle (rounded
	// up to a whole unit for TokenBucket and GCRA), 0 when none.
	Debt int64
}

// ReservationKey returns the store key of the record of the reservation
// id taken from the store key key: key + ":rsv:" + id, in key's hash slot
// (the first braces of key are its hash tag).
func ReservationKey(key, id string) string { return key + ":rsv:" + id }

// MaxSettle is the largest actual amount Settle takes (2^50): beyond it an
// amount is refused as an error, never rounded in a store's arithmetic.
const MaxSettle = 1 << 50
