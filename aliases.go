package sluice

import "github.com/sluicehq/sluice/driver"

// Rule is the validated form of a Policy that a store executes, as
// Limiter.Rule and Policy.Rule return it: see driver.Rule.
type Rule = driver.Rule

// Calendar is a period of the civil calendar in a time zone, for a
// FixedWindow whose windows are days, ISO weeks or months: see
// driver.Calendar.
type Calendar = driver.Calendar

// The units of a Calendar (see driver.CalendarUnit).
const (
	Day   = driver.Day
	Week  = driver.Week
	Month = driver.Month
)

// PolicyError is the error of a policy, plan, option, override or cost
// that cannot be enforced: see driver.PolicyError.
type PolicyError = driver.PolicyError

var (
	// ErrInvalidPolicy is returned by New for a policy that cannot be
	// enforced: a zero or negative limit, a window under a millisecond, a NaN
	// or infinite rate. The wrapping *PolicyError says which field is
	// wrong. It is driver.ErrInvalidPolicy.
	ErrInvalidPolicy = driver.ErrInvalidPolicy

	// ErrInvalidCost is returned for a negative cost, or a cost larger than
	// the policy's capacity (such a request could never be allowed, and
	// refusing it silently would hide a bug). It is driver.ErrInvalidCost.
	ErrInvalidCost = driver.ErrInvalidCost

	// ErrInvalidOverride is returned for an override that cannot be set: no
	// limit, an expiry that has passed, a window or rate the policy's
	// algorithm does not take. The wrapping *PolicyError names the field.
	// It is driver.ErrInvalidOverride.
	ErrInvalidOverride = driver.ErrInvalidOverride

	// ErrInvalidTime is returned for a time no store can decide at: the
	// limiter's clock (WithClock) or an override's expiry at or before the
	// Unix epoch, or after driver.MaxTime. It is driver.ErrInvalidTime.
	ErrInvalidTime = driver.ErrInvalidTime
)
