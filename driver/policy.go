package driver

import (
	"math"
	"strconv"
	"time"
)

// Algorithm names a rate-limiting algorithm.
type Algorithm uint8

// The algorithms, one per Policy type.
const (
	AlgorithmFixedWindow Algorithm = iota + 1
	AlgorithmSlidingLog
	AlgorithmSlidingWindow
	AlgorithmTokenBucket
	AlgorithmGCRA
	AlgorithmInFlight // at most Limit leases at once (see sluice.InFlight)
)

var algorithmNames = [...]string{
	AlgorithmFixedWindow:   "fixed_window",
	AlgorithmSlidingLog:    "sliding_log",
	AlgorithmSlidingWindow: "sliding_window",
	AlgorithmTokenBucket:   "token_bucket",
	AlgorithmGCRA:          "gcra",
	AlgorithmInFlight:      "in_flight",
}

// String returns the algorithm's configuration name, such as "token_bucket".
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) && algorithmNames[a] != "" {
		return algorithmNames[a]
	}
	return "Algorithm(" + strconv.Itoa(int(a)) + ")"
}

// ParseAlgorithm returns the Algorithm named s ("fixed_window",
// "sliding_log", "sliding_window", "token_bucket", "gcra" or "in_flight").
func ParseAlgorithm(s string) (Algorithm, error) {
	for a, name := range algorithmNames {
		if name != "" && name == s {
			return Algorithm(a), nil
		}
	}
	return 0, invalid("unknown algorithm %q (want fixed_window, sliding_log, sliding_window, token_bucket, gcra or in_flight)", s)
}

// MinWindow is the shortest window or period a policy may have.
const MinWindow = time.Millisecond

// MaxLimit is the largest limit, capacity or burst a policy may have, and
// the largest cost of one request: it keeps every count exactly
// representable in the float64 numbers Lua computes with.
const MaxLimit = 1 << 40

// MaxWindow is the longest window or period a policy may have, and the
// longest time a TokenBucket or GCRA may take to refill from empty: it is
// the longest time to live of a key, and keeps every microsecond timestamp
// and time to live exact in the float64 numbers Lua computes with.
const MaxWindow = 400 * 24 * time.Hour

// MaxSlidingLogLimit is the largest SlidingLog limit, and so the largest
// cost of one of its requests. The log keeps one sorted-set entry per unit
// (about 120 bytes each on Valkey, measured: see docs/guarantees.md), and a script
// adds a request's entries in one go while Valkey serves nobody else: the
// bound keeps a key under about 130 KB and the costliest decision to about
// a millisecond of Valkey's time. Use SlidingWindow for larger limits.
const MaxSlidingLogLimit = 1000

// CheckLimit reports whether n is a limit a policy may have (1 to MaxLimit);
// field names it in the error.
func CheckLimit(field string, n int64) error {
	if n <= 0 {
		return invalidField(field, "%s must be positive, got %d", field, n)
	}
	if n > MaxLimit {
		return invalidField(field, "%s must be at most %d, got %d", field, int64(MaxLimit), n)
	}
	return nil
}

// CheckWindow reports whether d is a window a policy may have: a whole
// number of microseconds from MinWindow to MaxWindow; field names it in the
// error.
func CheckWindow(field string, d time.Duration) error {
	if d < MinWindow {
		return invalidField(field, "%s must be at least %v, got %v", field, MinWindow, d)
	}
	if d > MaxWindow {
		return invalidField(field, "%s must be at most MaxWindow (%v), got %v", field, MaxWindow, d)
	}
	if d%time.Microsecond != 0 {
		return invalidField(field, "%s must be a whole number of microseconds, got %v", field, d)
	}
	return nil
}

// CheckRate validates rate events per period and returns the interval
// between two events, Per/Rate rounded to the microsecond.
func CheckRate(rate float64, per time.Duration) (time.Duration, error) {
	if math.IsNaN(rate) || math.IsInf(rate, 0) || rate <= 0 {
		return 0, invalidField("Rate", "Rate must be a positive finite number, got %v", rate)
	}
	if err := CheckWindow("Per", per); err != nil {
		return 0, err
	}
	interval := float64(per.Microseconds()) / rate
	if interval < 1 {
		return 0, invalidField("Rate", "Rate %v per %v is more than one per microsecond", rate, per)
	}
	if interval > float64(MaxWindow.Microseconds()) {
		return 0, invalidField("Rate", "Rate %v per %v is less than one per %v", rate, per, MaxWindow)
	}
	return time.Duration(math.Round(interval)) * time.Microsecond, nil
}

// CheckRefill bounds the time to earn limit units back at one per interval:
// it is the time to live of the keys, which must stay exact in Lua's
// numbers and within what Valkey's PEXPIRE accepts.
func CheckRefill(field string, limit int64, interval time.Duration) error {
	if interval > MaxWindow/time.Duration(limit) {
		return invalid("%s × Per/Rate (the time to refill from empty, %d × %v) must be at most MaxWindow (%v), the longest time to live a key may have",
			field, limit, interval, MaxWindow)
	}
	return nil
}

// Params are the numbers a policy is made of, by the names a configuration
// file gives them: Limit is the limit, capacity or burst; Window is for the
// window algorithms, Rate and Per for TokenBucket and GCRA (see
// Algorithm.Rated), Lease for InFlight.
type Params struct {
	Limit         int64
	Window        time.Duration
	Rate          float64
	Per           time.Duration
	Calendar      Calendar      // FixedWindow only, instead of Window
	CountRejected bool          // FixedWindow and SlidingLog only
	Lease         time.Duration // InFlight only
}

// Takes reports whether a takes the fields p sets: the one place that
// says which algorithm takes CountRejected, a Calendar, a Window, Rate
// and Per, or a Lease (the policy types have only the fields of their
// algorithm).
func (a Algorithm) Takes(p Params) error {
	switch {
	case p.CountRejected && a != AlgorithmSlidingLog && a != AlgorithmFixedWindow:
		return invalidField("CountRejected", "CountRejected is only for %v and %v, not %v", AlgorithmFixedWindow, AlgorithmSlidingLog, a)
	case !p.Calendar.IsZero() && a != AlgorithmFixedWindow:
		return invalidField("Calendar", "a Calendar period is only for %v, not %v", AlgorithmFixedWindow, a)
	case p.Lease != 0 && a != AlgorithmInFlight:
		return invalidField("Lease", "a Lease is only for %v, not %v", AlgorithmInFlight, a)
	case a == AlgorithmInFlight && (p.Window != 0 || p.Rate != 0 || p.Per != 0):
		return invalidField("Window", "%v takes Limit and Lease, not Window, Rate or Per", a)
	case a.Rated() && p.Window != 0:
		return invalidField("Window", "%v takes Rate and Per, not Window", a)
	case !a.Rated() && (p.Rate != 0 || p.Per != 0):
		return invalidField("Rate", "%v takes Window, not Rate and Per", a)
	}
	return nil
}

// GivesBackUntaken reports whether a key of a's state can be given back
// units without the Receipt of their take (a negative Cost in AllowEach,
// or an Envoy hits_addend refund): only FixedWindow's, whose count of the
// current window is all it keeps. Every algorithm gives back a take whose
// Receipt the refund carries (AllowAll does).
func (a Algorithm) GivesBackUntaken() bool { return a == AlgorithmFixedWindow }

// Rated reports whether a's policies are given as a rate (Rate per Per:
// TokenBucket, GCRA) rather than as a limit per window.
func (a Algorithm) Rated() bool { return a == AlgorithmTokenBucket || a == AlgorithmGCRA }
