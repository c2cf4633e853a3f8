package sluice

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// A Policy is one of FixedWindow, SlidingLog, SlidingWindow, TokenBucket,
// GCRA and InFlight. New validates it and turns it into a Rule for the store.
type Policy interface {
	// Rule validates the policy and returns its normalized form.
	Rule() (Rule, error)
}

// Algorithm names a rate-limiting algorithm.
type Algorithm uint8

// The algorithms, one per Policy type.
const (
	AlgorithmFixedWindow Algorithm = iota + 1
	AlgorithmSlidingLog
	AlgorithmSlidingWindow
	AlgorithmTokenBucket
	AlgorithmGCRA
	AlgorithmInFlight // at most Limit leases at once (see InFlight)
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

// within returns err with what before its reason ("plan \"pro\": ...")
// and owner before its Field ("TokenBucket." before "Rate"; "" keeps it):
// a *PolicyError stays one, and says its prefix once.
func within(what, owner string, err error) error {
	var pe *PolicyError
	if errors.As(err, &pe) {
		field := pe.Field
		if owner != "" && field != "" {
			field = owner + "." + field
		}
		return &PolicyError{Err: pe.Err, Field: field, Reason: what + ": " + pe.Reason}
	}
	return fmt.Errorf("%s: %w", what, err)
}

func checkLimit(field string, n int64) error {
	if n <= 0 {
		return invalidField(field, "%s must be positive, got %d", field, n)
	}
	if n > MaxLimit {
		return invalidField(field, "%s must be at most %d, got %d", field, int64(MaxLimit), n)
	}
	return nil
}

func checkWindow(field string, d time.Duration) error {
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

// checkRate validates rate events per period and returns the interval
// between two events, Per/Rate rounded to the microsecond.
func checkRate(rate float64, per time.Duration) (time.Duration, error) {
	if math.IsNaN(rate) || math.IsInf(rate, 0) || rate <= 0 {
		return 0, invalidField("Rate", "Rate must be a positive finite number, got %v", rate)
	}
	if err := checkWindow("Per", per); err != nil {
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

// FixedWindow allows Limit units per aligned Window (windows start at
// multiples of Window since the Unix epoch). Its state is one small counter
// per key; a client may get up to 2×Limit in a short span across a window
// edge.
//
// With CountRejected, refused requests are counted too (the counter only
// grows within a window, as Envoy's reference rate-limit service counts):
// a request is allowed when the count, its own cost included, is within
// Limit. A cost above Limit is then accepted and refused, filling the
// window. Remaining never goes below zero.
//
// With a Calendar instead of a Window, the windows are calendar days, ISO
// weeks or months in a time zone (see Calendar): a quota such as 10,000 a
// day, the day ending at midnight in Los Angeles.
type FixedWindow struct {
	Limit         int64
	Window        time.Duration
	Calendar      Calendar
	CountRejected bool
}

// Rule implements Policy.
func (p FixedWindow) Rule() (Rule, error) {
	if err := checkLimit("FixedWindow.Limit", p.Limit); err != nil {
		return Rule{}, err
	}
	if !p.Calendar.IsZero() {
		if p.Window != 0 {
			return Rule{}, invalidField("FixedWindow.Calendar", "FixedWindow takes a Window or a Calendar, not both")
		}
		if err := p.Calendar.validate(); err != nil {
			return Rule{}, err
		}
	} else if err := checkWindow("FixedWindow.Window", p.Window); err != nil {
		return Rule{}, err
	}
	return Rule{Algorithm: AlgorithmFixedWindow, Limit: p.Limit, Window: p.Window, Calendar: p.Calendar, CountRejected: p.CountRejected}, nil
}

// SlidingLog allows Limit units in any span of Window, exactly, by keeping
// the time of every unit taken in the last Window. Memory grows with Limit:
// use it for low limits on sensitive actions.
//
// With CountRejected, refused requests are logged too, so a client that keeps
// hammering stays refused until it pauses for a whole Window (brute-force
// lockout). Only the newest Limit entries are kept, so memory stays bounded.
type SlidingLog struct {
	Limit         int64
	Window        time.Duration
	CountRejected bool
}

// Rule implements Policy.
func (p SlidingLog) Rule() (Rule, error) {
	if err := checkLimit("SlidingLog.Limit", p.Limit); err != nil {
		return Rule{}, err
	}
	if p.Limit > MaxSlidingLogLimit {
		return Rule{}, invalidField("SlidingLog.Limit", "SlidingLog.Limit must be at most %d (MaxSlidingLogLimit: one entry is stored per unit; use SlidingWindow for large limits), got %d", MaxSlidingLogLimit, p.Limit)
	}
	if err := checkWindow("SlidingLog.Window", p.Window); err != nil {
		return Rule{}, err
	}
	return Rule{Algorithm: AlgorithmSlidingLog, Limit: p.Limit, Window: p.Window, CountRejected: p.CountRejected}, nil
}

// SlidingWindow approximates a sliding window with two counters: the current
// aligned window's and the previous one's, weighted by how much of the
// previous window still overlaps the sliding window:
//
//	estimate = previous × (Window − elapsed) / Window + current
//
// It assumes the previous window's requests were evenly spread.
type SlidingWindow struct {
	Limit  int64
	Window time.Duration
}

// Rule implements Policy.
func (p SlidingWindow) Rule() (Rule, error) {
	if err := checkLimit("SlidingWindow.Limit", p.Limit); err != nil {
		return Rule{}, err
	}
	if err := checkWindow("SlidingWindow.Window", p.Window); err != nil {
		return Rule{}, err
	}
	return Rule{Algorithm: AlgorithmSlidingWindow, Limit: p.Limit, Window: p.Window}, nil
}

// TokenBucket holds up to Capacity tokens and earns Rate tokens per Per,
// continuously: one token every Per/Rate, rounded to the microsecond (the
// Rule's Interval), in fractions of a token down to the microsecond. A
// request of cost n takes n tokens. A full bucket allows a burst of
// Capacity, then Rate per Per. The arithmetic is exact (integers of
// microseconds), so a request retried exactly RetryAfter later is allowed.
type TokenBucket struct {
	Capacity int64
	Rate     float64
	Per      time.Duration
}

// Rule implements Policy.
func (p TokenBucket) Rule() (Rule, error) {
	if err := checkLimit("TokenBucket.Capacity", p.Capacity); err != nil {
		return Rule{}, err
	}
	iv, err := checkRate(p.Rate, p.Per)
	if err != nil {
		return Rule{}, within("TokenBucket", "TokenBucket", err)
	}
	if err := checkRefill("TokenBucket: Capacity", p.Capacity, iv); err != nil {
		return Rule{}, err
	}
	return Rule{Algorithm: AlgorithmTokenBucket, Limit: p.Capacity, Interval: iv}, nil
}

// GCRA is the generic cell rate algorithm: Rate requests per Per, with bursts
// of up to Burst. It behaves like a TokenBucket of capacity Burst with a
// single integer of state (the theoretical arrival time). The interval
// between requests, Per/Rate, is rounded to the microsecond.
type GCRA struct {
	Rate  float64
	Per   time.Duration
	Burst int64
}

// Rule implements Policy.
func (p GCRA) Rule() (Rule, error) {
	if err := checkLimit("GCRA.Burst", p.Burst); err != nil {
		return Rule{}, err
	}
	iv, err := checkRate(p.Rate, p.Per)
	if err != nil {
		return Rule{}, within("GCRA", "GCRA", err)
	}
	if err := checkRefill("GCRA: Burst", p.Burst, iv); err != nil {
		return Rule{}, err
	}
	return Rule{Algorithm: AlgorithmGCRA, Limit: p.Burst, Interval: iv}, nil
}

// checkRefill bounds the time to earn limit units back at one per interval:
// it is the time to live of the keys, which must stay exact in Lua's
// numbers and within what Valkey's PEXPIRE accepts.
func checkRefill(field string, limit int64, interval time.Duration) error {
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

// Policy returns the Policy of algorithm a with the numbers of p, validated.
func (a Algorithm) Policy(p Params) (Policy, error) {
	var pol Policy
	switch a {
	case AlgorithmFixedWindow:
		pol = FixedWindow{Limit: p.Limit, Window: p.Window, Calendar: p.Calendar, CountRejected: p.CountRejected}
	case AlgorithmSlidingLog:
		pol = SlidingLog{Limit: p.Limit, Window: p.Window, CountRejected: p.CountRejected}
	case AlgorithmSlidingWindow:
		pol = SlidingWindow{Limit: p.Limit, Window: p.Window}
	case AlgorithmTokenBucket:
		pol = TokenBucket{Capacity: p.Limit, Rate: p.Rate, Per: p.Per}
	case AlgorithmGCRA:
		pol = GCRA{Rate: p.Rate, Per: p.Per, Burst: p.Limit}
	case AlgorithmInFlight:
		pol = InFlight{Limit: p.Limit, Lease: p.Lease}
	default:
		return nil, invalid("unknown algorithm %v", a)
	}
	if err := a.takes(p); err != nil {
		return nil, err
	}
	if _, err := pol.Rule(); err != nil {
		return nil, err
	}
	return pol, nil
}

// takes reports whether a takes the fields p sets: the one place that
// says which algorithm takes CountRejected, a Calendar, a Window, or Rate
// and Per (the policy types have only the fields of their algorithm).
func (a Algorithm) takes(p Params) error {
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
