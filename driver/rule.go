package driver

import (
	"fmt"
	"strconv"
	"time"
)

// Rule is the validated form of a Policy that a Store executes, and the one
// owner of what each algorithm means: the period shown to clients, the time
// to live of keys, the parameter a store's script takes, the default name
// and the state a key holds. All durations are whole microseconds.
//
// For the window algorithms, Limit units may be taken per Window. For
// TokenBucket, Limit is the capacity and Interval the time to earn one token;
// for GCRA, Limit is the burst and Interval the emission interval (both
// Per/Rate rounded to the microsecond). For InFlight, Limit is the most
// leases at once and Window the lease (see sluice.InFlight).
type Rule struct {
	Algorithm     Algorithm
	Limit         int64
	Window        time.Duration // window algorithms; InFlight: the lease
	Calendar      Calendar      // FixedWindow with calendar periods, instead of Window
	Interval      time.Duration // TokenBucket, GCRA: time per unit
	CountRejected bool          // SlidingLog, FixedWindow: refused requests are counted too
}

// Validate reports whether r can be executed by a store: it is what a Policy
// returns. Stores call it on rules built by hand.
func (r Rule) Validate() error {
	if err := CheckLimit("Limit", r.Limit); err != nil {
		return err
	}
	if err := r.Algorithm.Takes(Params{CountRejected: r.CountRejected, Calendar: r.Calendar}); err != nil {
		return err
	}
	if !r.Calendar.IsZero() {
		if r.Window != 0 {
			return invalid("a rule takes a Window or a Calendar, not both")
		}
		return r.Calendar.Validate()
	}
	switch r.Algorithm {
	case AlgorithmFixedWindow, AlgorithmSlidingWindow:
		return CheckWindow("Window", r.Window)
	case AlgorithmSlidingLog:
		if r.Limit > MaxSlidingLogLimit {
			return invalidField("Limit", "SlidingLog Limit must be at most %d (MaxSlidingLogLimit), got %d", MaxSlidingLogLimit, r.Limit)
		}
		return CheckWindow("Window", r.Window)
	case AlgorithmTokenBucket, AlgorithmGCRA:
		if r.Interval < time.Microsecond || r.Interval%time.Microsecond != 0 {
			return invalidField("Interval", "Interval must be a positive whole number of microseconds, got %v", r.Interval)
		}
		return CheckRefill("Limit", r.Limit, r.Interval)
	case AlgorithmInFlight:
		return validateInFlight(r)
	}
	return invalid("unknown algorithm %v", r.Algorithm)
}

// Period is the span the limit is measured over, as shown to clients: the
// window of the window algorithms, and for TokenBucket and GCRA the time to
// earn the whole limit back from empty (Limit × Interval). It is exact,
// except for calendar periods, whose length varies: it is then 24 hours, 7
// days or 31 days, and Span gives a period's real bounds.
func (r Rule) Period() time.Duration {
	if r.isCalendar() {
		return r.Calendar.nominal()
	}
	if r.Algorithm.Rated() {
		return time.Duration(r.Limit) * r.Interval
	}
	return r.Window
}

// keyLife is the longest time a key's state is needed after its last
// write: a window (two for SlidingWindow, whose previous window still
// counts), or the time to refill from empty.
func (r Rule) keyLife() time.Duration {
	if r.isCalendar() {
		return r.Calendar.longest()
	}
	if r.Algorithm == AlgorithmSlidingWindow {
		return 2 * r.Window
	}
	return r.Period()
}

// TTL is the longest time to live a key of r may have: the time its state
// is needed, in whole milliseconds rounded up (PEXPIRE's unit), plus
// KeyTTLMargin. Stores never set a longer one.
func (r Rule) TTL() time.Duration {
	return ceilMilli(r.keyLife()) + KeyTTLMargin
}

// ceilMilli is d rounded up to a whole millisecond.
func ceilMilli(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1) / time.Millisecond * time.Millisecond
}

// isCalendar reports whether r's windows are calendar periods.
func (r Rule) isCalendar() bool { return !r.Calendar.IsZero() }

// Span returns the window of a FixedWindow rule that holds t: its first
// instant and the first instant of the next window. Calendar periods are
// computed in their zone; other windows are aligned on the Unix epoch.
func (r Rule) Span(t time.Time) (start, end time.Time) {
	if r.isCalendar() {
		return r.Calendar.Span(t)
	}
	w := r.Window.Microseconds()
	us := t.UnixMicro()
	idx := us / w
	if us < 0 && us%w != 0 {
		idx--
	}
	return time.UnixMicro(idx * w), time.UnixMicro((idx + 1) * w)
}

// Param is the algorithm's parameter as a store's script takes it, in
// microseconds: the window, or the interval of TokenBucket and GCRA (0 for
// calendar periods: see luascript.CalendarBounds).
func (r Rule) Param() int64 {
	if r.Algorithm.Rated() {
		return r.Interval.Microseconds()
	}
	return r.Window.Microseconds()
}

// State names the layout of the state a key of r holds: the algorithm and
// the version of its state format. It is part of every key (see Key), so
// limiters of different algorithms never read each other's state, even
// under one name (a rolling deploy that changes a limiter's algorithm runs
// both on separate state), and a changed state format starts afresh.
func (r Rule) State() string {
	// Each name is versioned: the fixed window ("fw", "cal"), sliding window
	// ("sw") and token bucket ("tb" with float tokens, then "tb2") kept a
	// hash before their integers were packed into one string.
	switch r.Algorithm {
	case AlgorithmFixedWindow:
		if r.isCalendar() {
			return "cal2" // the window is named by its first instant
		}
		return "fw2"
	case AlgorithmSlidingLog:
		return "sl"
	case AlgorithmSlidingWindow:
		return "sw2"
	case AlgorithmTokenBucket:
		return "tb3" // microseconds of credit and their time
	case AlgorithmGCRA:
		return "gcra"
	case AlgorithmInFlight:
		return "if1" // a sorted set: lease id, scored by when it ends
	}
	return "x" + strconv.Itoa(int(r.Algorithm))
}

// String describes the rule, such as "gcra(burst=20, interval=200ms)".
func (r Rule) String() string {
	switch r.Algorithm {
	case AlgorithmTokenBucket:
		return fmt.Sprintf("token_bucket(capacity=%d, interval=%v)", r.Limit, r.Interval)
	case AlgorithmGCRA:
		return fmt.Sprintf("gcra(burst=%d, interval=%v)", r.Limit, r.Interval)
	case AlgorithmInFlight:
		return fmt.Sprintf("in_flight(limit=%d, lease=%v)", r.Limit, r.Window)
	}
	s := fmt.Sprintf("%v(limit=%d, window=%v", r.Algorithm, r.Limit, r.Window)
	if r.isCalendar() {
		s = fmt.Sprintf("%v(limit=%d, period=%v", r.Algorithm, r.Limit, r.Calendar)
	}
	if r.CountRejected {
		s += ", count_rejected"
	}
	return s + ")"
}

// Overridden returns r with limit and param (microseconds of window or
// interval; 0 keeps r's), as a store applies an override it read, and an
// error when the result is not a valid rule (a malformed override).
func (r Rule) Overridden(limit, param int64) (Rule, error) {
	out := r
	out.Limit = limit
	if param != 0 {
		if r.isCalendar() {
			return Rule{}, invalid("a calendar period's override sets its limit only")
		}
		if r.Algorithm.Rated() {
			out.Interval = time.Duration(param) * time.Microsecond
		} else {
			out.Window = time.Duration(param) * time.Microsecond
		}
	}
	if param < 0 || param > MaxWindow.Microseconds() {
		return Rule{}, invalid("parameter %dus out of range", param)
	}
	if err := out.Validate(); err != nil {
		return Rule{}, err
	}
	return out, nil
}
