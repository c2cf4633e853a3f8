package sluice

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// A Policy is one of FixedWindow, SlidingLog, SlidingWindow, TokenBucket and
// GCRA. New validates it and turns it into a Rule for the store.
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
)

var algorithmNames = [...]string{
	AlgorithmFixedWindow:   "fixed_window",
	AlgorithmSlidingLog:    "sliding_log",
	AlgorithmSlidingWindow: "sliding_window",
	AlgorithmTokenBucket:   "token_bucket",
	AlgorithmGCRA:          "gcra",
}

// String returns the algorithm's configuration name, such as "token_bucket".
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) && algorithmNames[a] != "" {
		return algorithmNames[a]
	}
	return "Algorithm(" + strconv.Itoa(int(a)) + ")"
}

// ParseAlgorithm returns the Algorithm named s ("fixed_window",
// "sliding_log", "sliding_window", "token_bucket" or "gcra").
func ParseAlgorithm(s string) (Algorithm, error) {
	for a, name := range algorithmNames {
		if name != "" && name == s {
			return Algorithm(a), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown algorithm %q (want fixed_window, sliding_log, sliding_window, token_bucket or gcra)", ErrInvalidPolicy, s)
}

// Rule is the validated form of a Policy that a Store executes. All
// durations are whole microseconds.
//
// For the window algorithms, Limit units may be taken per Window. For
// TokenBucket, Limit is the capacity and Interval the time to earn one token
// (Per/Rate, kept exact as a float in Rate). For GCRA, Limit is the burst and
// Interval the emission interval (Per/Rate rounded to the microsecond).
type Rule struct {
	Algorithm     Algorithm
	Limit         int64
	Window        time.Duration // window algorithms
	Interval      time.Duration // GCRA: emission interval; TokenBucket: informative
	Rate          float64       // TokenBucket: tokens earned per microsecond
	CountRejected bool          // SlidingLog, FixedWindow: refused requests are counted too
}

// MinWindow is the shortest window or period a policy may have.
const MinWindow = time.Millisecond

// maxLimit keeps every count exactly representable in the float64 numbers
// Lua computes with.
const maxLimit = 1 << 40

// maxWindow keeps every microsecond timestamp and TTL exact in a float64.
const maxWindow = 400 * 24 * time.Hour

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidPolicy}, args...)...)
}

func checkLimit(field string, n int64) error {
	if n <= 0 {
		return invalid("%s must be positive, got %d", field, n)
	}
	if n > maxLimit {
		return invalid("%s must be at most %d, got %d", field, int64(maxLimit), n)
	}
	return nil
}

func checkWindow(field string, d time.Duration) error {
	if d < MinWindow {
		return invalid("%s must be at least %v, got %v", field, MinWindow, d)
	}
	if d > maxWindow {
		return invalid("%s must be at most %v, got %v", field, maxWindow, d)
	}
	if d%time.Microsecond != 0 {
		return invalid("%s must be a whole number of microseconds, got %v", field, d)
	}
	return nil
}

// checkRate validates rate events per period and returns the interval
// between two events in microseconds, as a float.
func checkRate(rate float64, per time.Duration) (float64, error) {
	if math.IsNaN(rate) || math.IsInf(rate, 0) || rate <= 0 {
		return 0, invalid("Rate must be a positive finite number, got %v", rate)
	}
	if err := checkWindow("Per", per); err != nil {
		return 0, err
	}
	interval := float64(per.Microseconds()) / rate
	if interval < 1 {
		return 0, invalid("Rate %v per %v is more than one per microsecond", rate, per)
	}
	if interval > float64(maxWindow.Microseconds()) {
		return 0, invalid("Rate %v per %v is less than one per %v", rate, per, maxWindow)
	}
	return interval, nil
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
type FixedWindow struct {
	Limit         int64
	Window        time.Duration
	CountRejected bool
}

// Rule implements Policy.
func (p FixedWindow) Rule() (Rule, error) {
	if err := checkLimit("FixedWindow.Limit", p.Limit); err != nil {
		return Rule{}, err
	}
	if err := checkWindow("FixedWindow.Window", p.Window); err != nil {
		return Rule{}, err
	}
	return Rule{Algorithm: AlgorithmFixedWindow, Limit: p.Limit, Window: p.Window, CountRejected: p.CountRejected}, nil
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
	if p.Limit > 1<<20 {
		return Rule{}, invalid("SlidingLog.Limit must be at most %d (one entry is stored per unit; use SlidingWindow for large limits), got %d", 1<<20, p.Limit)
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

// TokenBucket holds up to Capacity tokens and earns Rate tokens per Per
// (continuously, in fractions). A request of cost n takes n tokens. A full
// bucket allows a burst of Capacity, then Rate per Per.
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
	interval, err := checkRate(p.Rate, p.Per)
	if err != nil {
		return Rule{}, fmt.Errorf("TokenBucket: %w", err)
	}
	return Rule{
		Algorithm: AlgorithmTokenBucket,
		Limit:     p.Capacity,
		Interval:  time.Duration(math.Ceil(interval)) * time.Microsecond,
		Rate:      1 / interval,
	}, nil
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
	interval, err := checkRate(p.Rate, p.Per)
	if err != nil {
		return Rule{}, fmt.Errorf("GCRA: %w", err)
	}
	iv := time.Duration(math.Round(interval)) * time.Microsecond
	if iv*time.Duration(p.Burst) > maxWindow || iv*time.Duration(p.Burst) < 0 {
		return Rule{}, invalid("GCRA: Burst × Per/Rate must be at most %v", maxWindow)
	}
	return Rule{Algorithm: AlgorithmGCRA, Limit: p.Burst, Interval: iv}, nil
}

// Validate reports whether r can be executed by a store: it is what a Policy
// returns. Stores call it on rules built by hand.
func (r Rule) Validate() error {
	if err := checkLimit("Limit", r.Limit); err != nil {
		return err
	}
	switch r.Algorithm {
	case AlgorithmFixedWindow, AlgorithmSlidingLog, AlgorithmSlidingWindow:
		return checkWindow("Window", r.Window)
	case AlgorithmTokenBucket:
		if math.IsNaN(r.Rate) || math.IsInf(r.Rate, 0) || r.Rate <= 0 || r.Rate > 1 {
			return invalid("Rate must be in (0, 1] tokens per microsecond, got %v", r.Rate)
		}
		return nil
	case AlgorithmGCRA:
		if r.Interval < time.Microsecond || r.Interval%time.Microsecond != 0 {
			return invalid("Interval must be a positive whole number of microseconds, got %v", r.Interval)
		}
		return nil
	}
	return invalid("unknown algorithm %v", r.Algorithm)
}

// String describes the rule, such as "gcra(burst=20, interval=200ms)".
func (r Rule) String() string {
	switch r.Algorithm {
	case AlgorithmTokenBucket:
		return fmt.Sprintf("token_bucket(capacity=%d, rate=%g/s)", r.Limit, r.Rate*1e6)
	case AlgorithmGCRA:
		return fmt.Sprintf("gcra(burst=%d, interval=%v)", r.Limit, r.Interval)
	}
	s := fmt.Sprintf("%v(limit=%d, window=%v", r.Algorithm, r.Limit, r.Window)
	if r.CountRejected {
		s += ", count_rejected"
	}
	return s + ")"
}

// name is the default limiter name for a rule: distinct rules get distinct
// names, so limiters that share a store do not share state unless their
// policies are identical.
func (r Rule) name() string {
	switch r.Algorithm {
	case AlgorithmTokenBucket:
		return fmt.Sprintf("tb-%d-%s", r.Limit, strconv.FormatFloat(r.Rate*1e6, 'f', -1, 64))
	case AlgorithmGCRA:
		return fmt.Sprintf("gcra-%d-%d", r.Limit, r.Interval.Microseconds())
	case AlgorithmFixedWindow:
		if r.CountRejected {
			return fmt.Sprintf("fwc-%d-%d", r.Limit, r.Window.Microseconds())
		}
		return fmt.Sprintf("fw-%d-%d", r.Limit, r.Window.Microseconds())
	case AlgorithmSlidingLog:
		if r.CountRejected {
			return fmt.Sprintf("slc-%d-%d", r.Limit, r.Window.Microseconds())
		}
		return fmt.Sprintf("sl-%d-%d", r.Limit, r.Window.Microseconds())
	case AlgorithmSlidingWindow:
		return fmt.Sprintf("sw-%d-%d", r.Limit, r.Window.Microseconds())
	}
	return "unknown"
}
