package driver

import (
	"encoding/base64"
	"errors"
	"fmt"
)

// For store implementers: in-flight limits (sluice.InFlight). A Rule of
// AlgorithmInFlight allows at most Limit leases per key at once, each
// ending Window after it was acquired or last renewed, by the deciding
// clock; an Op names its lease (Op.Lease) to acquire, renew or release it.

// MaxInFlightLimit is the largest InFlight Limit. A key keeps one sorted-set
// entry per lease (about 100 bytes on Valkey): the bound keeps a key under
// about a megabyte.
const MaxInFlightLimit = 10000

// ErrInvalidLease is the error for a lease id that is not one
// sluice.Limiter.Acquire gives (see sluice.Limiter.Lease), and for an Op
// whose lease fields do not fit its algorithm. Package sluice re-declares
// it with the same value.
var ErrInvalidLease = errors.New("sluice: invalid lease")

// A LeaseID names one lease in a store: 128 random bits, so that a client
// cannot free another holder's slot by guessing. The zero LeaseID is none.
type LeaseID [16]byte

// IsZero reports whether id is the zero LeaseID.
func (id LeaseID) IsZero() bool { return id == LeaseID{} }

// String returns id in unpadded base64url, 22 characters.
func (id LeaseID) String() string { return base64.RawURLEncoding.EncodeToString(id[:]) }

// ParseLeaseID returns the LeaseID of s, as LeaseID.String writes it; an
// error wrapping ErrInvalidLease otherwise.
func ParseLeaseID(s string) (LeaseID, error) {
	var id LeaseID
	if len(s) != 22 {
		return id, fmt.Errorf("%w: a lease id is 22 characters, got %d", ErrInvalidLease, len(s))
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil || len(b) != 16 {
		return id, fmt.Errorf("%w: %q is not a lease id (unpadded base64url of 16 bytes)", ErrInvalidLease, s)
	}
	copy(id[:], b)
	if id.IsZero() {
		return id, fmt.Errorf("%w: the zero lease id names no lease", ErrInvalidLease)
	}
	return id, nil
}

// validateInFlight is Rule.Validate for AlgorithmInFlight.
func validateInFlight(r Rule) error {
	if err := CheckLimit("Limit", r.Limit); err != nil {
		return err
	}
	if r.Limit > MaxInFlightLimit {
		return invalidField("Limit", "Limit must be at most %d (MaxInFlightLimit), got %d", MaxInFlightLimit, r.Limit)
	}
	if r.Interval != 0 {
		return invalidField("Interval", "an in_flight rule takes Limit and Window (the lease), not Interval")
	}
	return CheckWindow("Lease", r.Window)
}

// validateLeaseOp is Op.Validate for an InFlight Op, or an Op with lease
// fields: an acquire (Cost 1 and a Lease), a renewal (Renew, Cost 0 and a
// Lease), a release (Cost -1 and a Lease) or a peek (Cost 0, no Lease).
// The Op's Rule and Now are already checked.
func validateLeaseOp(op *Op) error {
	if op.Rule.Algorithm != AlgorithmInFlight {
		return &PolicyError{Err: ErrInvalidLease, Field: "Op.Lease", Reason: fmt.Sprintf("a lease is only for %v, not %v", AlgorithmInFlight, op.Rule.Algorithm)}
	}
	switch {
	case op.Cost < -1 || op.Cost > 1:
		return leaseCost("an %v decision costs 1 (acquire), 0 (peek or renew) or -1 (release), got %d", AlgorithmInFlight, op.Cost)
	case op.Renew && op.Cost != 0:
		return leaseCost("a renewal costs 0, got %d", op.Cost)
	case op.Lease.IsZero() && (op.Cost != 0 || op.Renew):
		return &PolicyError{Err: ErrInvalidLease, Field: "Op.Lease", Reason: "an acquire, renewal or release names its lease"}
	case !op.Lease.IsZero() && op.Cost == 0 && !op.Renew:
		return &PolicyError{Err: ErrInvalidLease, Field: "Op.Lease", Reason: "a peek names no lease"}
	}
	return nil
}

// leaseCost returns the *PolicyError of an InFlight Op's cost.
func leaseCost(format string, args ...any) error {
	return &PolicyError{Err: ErrInvalidCost, Field: "Cost", Reason: fmt.Sprintf(format, args...)}
}
