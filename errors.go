package sluice

import "errors"

var (
	// ErrInvalidPolicy is returned by New for a policy that cannot be
	// enforced: a zero or negative limit, a window under a millisecond, a NaN
	// or infinite rate. The wrapping error says which field is wrong.
	ErrInvalidPolicy = errors.New("sluice: invalid policy")

	// ErrInvalidCost is returned for a negative cost, or a cost larger than
	// the policy's capacity (such a request could never be allowed, and
	// refusing it silently would hide a bug).
	ErrInvalidCost = errors.New("sluice: invalid cost")

	// ErrNotCreated is returned by every decision of a Limiter that New did
	// not make: a nil *Limiter or the zero Limiter, which has no store.
	ErrNotCreated = errors.New("sluice: Limiter not made by New")

	// ErrInvalidKey is returned for an empty key.
	ErrInvalidKey = errors.New("sluice: invalid key")

	// ErrStoreUnavailable wraps the store's error when a decision could not
	// be made by the store (timeout, connection refused, server error). The
	// Result returned with it was decided by the limiter's fail mode.
	ErrStoreUnavailable = errors.New("sluice: store unavailable")
)

// ErrClockSkew is a store's error for a decision with calendar periods
// whose time (the store's clock, or the Op's Now) is outside the periods
// computed around the clock of the process that sent it: the two clocks
// differ by about a period or more.
var ErrClockSkew = errors.New("sluice: deciding clock outside the calendar periods sent (clock skew)")
