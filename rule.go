package sluice

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
// Per/Rate rounded to the microsecond).
type Rule struct {
	Algorithm     Algorithm
	Limit         int64
	Window        time.Duration // window algorithms
	Calendar      Calendar      // FixedWindow with calendar periods, instead of Window
	Interval      time.Duration // TokenBucket, GCRA: time per unit
	CountRejected bool          // SlidingLog, FixedWindow: refused requests are counted too
}

// Validate reports whether r can be executed by a store: it is what a Policy
// returns. Stores call it on rules built by hand.
func (r Rule) Validate() error {
	if err := checkLimit("Limit", r.Limit); err != nil {
		return err
	}
	if err := r.Algorithm.takes(Params{CountRejected: r.CountRejected, Calendar: r.Calendar}); err != nil {
		return err
	}
	if !r.Calendar.IsZero() {
		if r.Window != 0 {
			return invalid("a rule takes a Window or a Calendar, not both")
		}
		return r.Calendar.validate()
	}
	switch r.Algorithm {
	case AlgorithmFixedWindow, AlgorithmSlidingWindow:
		return checkWindow("Window", r.Window)
	case AlgorithmSlidingLog:
		if r.Limit > MaxSlidingLogLimit {
			return invalidField("Limit", "SlidingLog Limit must be at most %d (MaxSlidingLogLimit), got %d", MaxSlidingLogLimit, r.Limit)
		}
		return checkWindow("Window", r.Window)
	case AlgorithmTokenBucket, AlgorithmGCRA:
		if r.Interval < time.Microsecond || r.Interval%time.Microsecond != 0 {
			return invalidField("Interval", "Interval must be a positive whole number of microseconds, got %v", r.Interval)
		}
		return checkRefill("Limit", r.Limit, r.Interval)
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

// defaultName is the limiter name New gives r unless WithName says
// otherwise, such as "gcra-20-200000": distinct rules get distinct names, so
// limiters that share a store do not share state unless their policies are
// identical.
func (r Rule) defaultName() string {
	short := map[Algorithm]string{AlgorithmFixedWindow: "fw", AlgorithmSlidingLog: "sl",
		AlgorithmSlidingWindow: "sw", AlgorithmTokenBucket: "tb", AlgorithmGCRA: "gcra"}[r.Algorithm]
	if r.CountRejected {
		short += "c" // fwc, slc
	}
	if r.isCalendar() {
		return calendarName(short, r.Limit, r.Calendar)
	}
	return short + "-" + strconv.FormatInt(r.Limit, 10) + "-" + strconv.FormatInt(r.Param(), 10)
}

// NextUnit returns how long after res, a Result of r for a request of
// cost, the key has more than res.Remaining units again: the "t" of the
// RateLimit header field (draft-ietf-httpapi-ratelimit-headers: the time
// until additional quota is made available). known is false when res does
// not determine it:
//
//   - nothing is taken (Remaining is Limit), or res is Degraded;
//   - for SlidingLog and SlidingWindow, whose Result does not say when the
//     oldest counted unit leaves the window, except after a refusal of
//     cost 1 or a peek (then it is RetryAfter) and, for SlidingLog, with a
//     single unit logged (then it is ResetAfter).
//
// FixedWindow restores everything at the window's end (ResetAfter);
// TokenBucket and GCRA earn the next unit within one Interval.
func (r Rule) NextUnit(res Result, cost int64) (d time.Duration, known bool) {
	if res.Degraded || res.Remaining >= r.Limit {
		return 0, false
	}
	if !res.Allowed && cost <= 1 {
		// One unit short: the time until one more is there.
		return res.RetryAfter, res.RetryAfter > 0
	}
	switch r.Algorithm {
	case AlgorithmFixedWindow:
		d = res.ResetAfter
	case AlgorithmTokenBucket, AlgorithmGCRA:
		// ResetAfter earns Limit-Remaining units back, the last of them
		// Interval apart: the first comes once the others' time is left.
		d = res.ResetAfter - time.Duration(r.Limit-res.Remaining-1)*r.Interval
	case AlgorithmSlidingLog:
		if r.Limit-res.Remaining == 1 {
			d = res.ResetAfter
		}
	}
	return d, d > 0
}

// laterRefusal returns the Result a store gives a request of need units, d
// after it refused a request of need0 units with res, when that follows
// from res alone (nothing taken or given back meanwhile); ok is false when
// it does not, or when the request may be allowed. The deny cache answers
// with it.
func (r Rule) laterRefusal(res Result, need0, need int64, d time.Duration) (later Result, ok bool) {
	if d < 0 || d >= res.RetryAfter {
		return Result{}, false
	}
	later = res
	later.ResetAfter = res.ResetAfter - d
	later.RetryAfter = res.RetryAfter - d
	switch {
	case r.Algorithm.Rated():
		// The credit, in microseconds, is need0 × Interval − RetryAfter,
		// and grows by one per microsecond while it is short of a token.
		iv := r.Interval.Microseconds()
		credit := need0*iv - later.RetryAfter.Microseconds()
		if credit >= need*iv {
			return Result{}, false
		}
		later.RetryAfter = time.Duration(need*iv-credit) * time.Microsecond
		later.Remaining = max(0, credit) / iv // a debt (negative credit) leaves none
	case r.Algorithm == AlgorithmFixedWindow && !r.CountRejected:
		// The count stays until the window ends, when RetryAfter does.
		if need <= res.Remaining {
			return Result{}, false
		}
	case r.Algorithm == AlgorithmSlidingLog && !r.CountRejected:
		// Remaining stays while no entry leaves the log: when the refusal
		// waits for the oldest one.
		if need != need0 || res.Remaining != need0-1 {
			return Result{}, false
		}
	case r.Algorithm == AlgorithmSlidingWindow:
		// Remaining stays at zero until a request of one unit is allowed.
		if need != 1 || need0 != 1 {
			return Result{}, false
		}
	default:
		return Result{}, false
	}
	return later, true
}
