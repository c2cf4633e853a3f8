package sluice

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// A Policy is one of FixedWindow, SlidingLog, SlidingWindow, TokenBucket,
// GCRA and InFlight. New validates it and turns it into a Rule for the store.
type Policy interface {
	// Rule validates the policy and returns its normalized form.
	Rule() (Rule, error)
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
	if err := driver.CheckLimit("FixedWindow.Limit", p.Limit); err != nil {
		return Rule{}, err
	}
	if !p.Calendar.IsZero() {
		if p.Window != 0 {
			return Rule{}, invalidField("FixedWindow.Calendar", "FixedWindow takes a Window or a Calendar, not both")
		}
		if err := p.Calendar.Validate(); err != nil {
			return Rule{}, err
		}
	} else if err := driver.CheckWindow("FixedWindow.Window", p.Window); err != nil {
		return Rule{}, err
	}
	return Rule{Algorithm: driver.AlgorithmFixedWindow, Limit: p.Limit, Window: p.Window, Calendar: p.Calendar, CountRejected: p.CountRejected}, nil
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
	if err := driver.CheckLimit("SlidingLog.Limit", p.Limit); err != nil {
		return Rule{}, err
	}
	if p.Limit > driver.MaxSlidingLogLimit {
		return Rule{}, invalidField("SlidingLog.Limit", "SlidingLog.Limit must be at most %d (MaxSlidingLogLimit: one entry is stored per unit; use SlidingWindow for large limits), got %d", driver.MaxSlidingLogLimit, p.Limit)
	}
	if err := driver.CheckWindow("SlidingLog.Window", p.Window); err != nil {
		return Rule{}, err
	}
	return Rule{Algorithm: driver.AlgorithmSlidingLog, Limit: p.Limit, Window: p.Window, CountRejected: p.CountRejected}, nil
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
	if err := driver.CheckLimit("SlidingWindow.Limit", p.Limit); err != nil {
		return Rule{}, err
	}
	if err := driver.CheckWindow("SlidingWindow.Window", p.Window); err != nil {
		return Rule{}, err
	}
	return Rule{Algorithm: driver.AlgorithmSlidingWindow, Limit: p.Limit, Window: p.Window}, nil
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
	if err := driver.CheckLimit("TokenBucket.Capacity", p.Capacity); err != nil {
		return Rule{}, err
	}
	iv, err := driver.CheckRate(p.Rate, p.Per)
	if err != nil {
		return Rule{}, within("TokenBucket", "TokenBucket", err)
	}
	if err := driver.CheckRefill("TokenBucket: Capacity", p.Capacity, iv); err != nil {
		return Rule{}, err
	}
	return Rule{Algorithm: driver.AlgorithmTokenBucket, Limit: p.Capacity, Interval: iv}, nil
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
	if err := driver.CheckLimit("GCRA.Burst", p.Burst); err != nil {
		return Rule{}, err
	}
	iv, err := driver.CheckRate(p.Rate, p.Per)
	if err != nil {
		return Rule{}, within("GCRA", "GCRA", err)
	}
	if err := driver.CheckRefill("GCRA: Burst", p.Burst, iv); err != nil {
		return Rule{}, err
	}
	return Rule{Algorithm: driver.AlgorithmGCRA, Limit: p.Burst, Interval: iv}, nil
}
