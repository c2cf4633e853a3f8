package driver

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalidTime is returned for a time no store can decide at: an Op's
// Now, the limiter's clock (WithClock) or an override's expiry at or before
// the Unix epoch, or after MaxTime. A store keeps instants as positive
// microseconds since the epoch (a take's time is its receipt, and 0 is no
// receipt), in the float64 numbers Lua computes with, so such a decision is
// refused with this error rather than decided wrong.
var ErrInvalidTime = errors.New("sluice: invalid time")

// MaxTime is the latest time a decision or an override's expiry may have:
// past it, a microsecond timestamp plus MaxWindow and the key's margin no
// longer fits the 53 bits a float64 holds exactly.
var MaxTime = time.UnixMicro(1<<53 - 2*MaxWindow.Microseconds()).UTC()

// MinTime is the earliest time a decision or an override's expiry may
// have: the first microsecond after the Unix epoch.
var MinTime = time.UnixMicro(1).UTC()

// CheckTime reports whether a store can decide at t: from MinTime to
// MaxTime. It is an error wrapping ErrInvalidTime otherwise; what names t
// (such as "now" or "expires").
func CheckTime(what string, t time.Time) error {
	if r := timeReason(what, t); r != "" {
		return fmt.Errorf("%w: %s", ErrInvalidTime, r)
	}
	return nil
}

// timeReason says why a store cannot keep t, or is "" when it can.
func timeReason(what string, t time.Time) string {
	if t.Before(MinTime) || t.After(MaxTime) {
		return fmt.Sprintf("%s %v is outside what a store keeps (%v to %v)",
			what, t.UTC().Format(time.RFC3339Nano), MinTime.Format(time.RFC3339Nano), MaxTime.Format(time.RFC3339))
	}
	return ""
}
