package sluice

import (
	"errors"
	"fmt"
)

var (
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

// invalid returns the *PolicyError of a policy that cannot be enforced,
// for no one field.
func invalid(format string, args ...any) error {
	return invalidField("", format, args...)
}

// invalidField returns the *PolicyError of a policy whose field cannot be
// enforced.
func invalidField(field, format string, args ...any) error {
	return &PolicyError{Err: ErrInvalidPolicy, Field: field, Reason: fmt.Sprintf(format, args...)}
}
