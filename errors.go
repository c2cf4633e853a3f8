package sluice

import (
	"errors"
	"fmt"
)

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

// PolicyError is the error of a policy, plan, option, override or cost
// that cannot be enforced. Field names what is wrong as the Go API spells
// it (such as "FixedWindow.Window", "Override.Limit", "WithName" or
// "Cost"), or is "" when no one field is (two fields that contradict each
// other); Reason says what is wrong, naming the field (such as "Window
// must be at least 1ms, got 0s"); Err is the kind it wraps,
// ErrInvalidPolicy, ErrInvalidOverride or ErrInvalidCost. Error returns
// Err's text and the reason, once: an override refused for a policy's
// reason reads "sluice: invalid override: window must be at least 1ms, got
// 0s", and a program that shows the reason in its own words reads Reason
// (errors.As, or the function Reason) rather than cutting a prefix off
// Error's text.
type PolicyError struct {
	Err    error
	Field  string
	Reason string
}

func (e *PolicyError) Error() string { return e.Err.Error() + ": " + e.Reason }

// Unwrap returns Err.
func (e *PolicyError) Unwrap() error { return e.Err }

// badCost returns the *PolicyError of a cost that cannot be decided.
func badCost(format string, args ...any) error {
	return &PolicyError{Err: ErrInvalidCost, Field: "Cost", Reason: fmt.Sprintf(format, args...)}
}

// Reason returns what is wrong, as PolicyError.Reason, when err is or
// wraps a *PolicyError; else err's text.
func Reason(err error) string {
	var pe *PolicyError
	if errors.As(err, &pe) {
		return pe.Reason
	}
	return err.Error()
}
