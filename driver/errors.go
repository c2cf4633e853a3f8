package driver

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidPolicy is returned (by sluice.New, and by Rule.Validate) for a policy that cannot be
	// enforced: a zero or negative limit, a window under a millisecond, a NaN
	// or infinite rate. The wrapping error says which field is wrong.
	ErrInvalidPolicy = errors.New("sluice: invalid policy")

	// ErrInvalidCost is returned for a negative cost, or a cost larger than
	// the policy's capacity (such a request could never be allowed, and
	// refusing it silently would hide a bug).
	ErrInvalidCost = errors.New("sluice: invalid cost")

	// ErrInvalidOverride is returned for an override that cannot be set: no
	// limit, an expiry that has passed, a window or rate the policy's
	// algorithm does not take. The wrapping error names the field.
	ErrInvalidOverride = errors.New("sluice: invalid override")
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

// badOverride returns the *PolicyError of an override whose field (of
// Override, or "") cannot be set.
func badOverride(field, format string, args ...any) error {
	return &PolicyError{Err: ErrInvalidOverride, Field: field, Reason: fmt.Sprintf(format, args...)}
}
