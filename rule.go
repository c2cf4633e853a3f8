package sluice

import (
	"strconv"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// defaultName is the limiter name New gives r unless WithName says
// otherwise, such as "gcra-20-200000": distinct rules get distinct names, so
// limiters that share a store do not share state unless their policies are
// identical.
func defaultName(r Rule) string {
	short := map[driver.Algorithm]string{driver.AlgorithmFixedWindow: "fw", driver.AlgorithmSlidingLog: "sl",
		driver.AlgorithmSlidingWindow: "sw", driver.AlgorithmTokenBucket: "tb", driver.AlgorithmGCRA: "gcra",
		driver.AlgorithmInFlight: "if"}[r.Algorithm]
	if r.CountRejected {
		short += "c" // fwc, slc
	}
	if !r.Calendar.IsZero() {
		return calendarName(short, r.Limit, r.Calendar)
	}
	return short + "-" + strconv.FormatInt(r.Limit, 10) + "-" + strconv.FormatInt(r.Param(), 10)
}

// laterRefusal returns the Result a store gives a request of need units, d
// after it refused a request of need0 units with res, when that follows
// from res alone (nothing taken or given back meanwhile); ok is false when
// it does not, or when the request may be allowed. The deny cache answers
// with it.
func laterRefusal(r Rule, res Result, need0, need int64, d time.Duration) (later Result, ok bool) {
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
	case r.Algorithm == driver.AlgorithmFixedWindow && !r.CountRejected:
		// The count stays until the window ends, when RetryAfter does.
		if need <= res.Remaining {
			return Result{}, false
		}
	case r.Algorithm == driver.AlgorithmSlidingLog && !r.CountRejected:
		// Remaining stays while no entry leaves the log: when the refusal
		// waits for the oldest one.
		if need != need0 || res.Remaining != need0-1 {
			return Result{}, false
		}
	case r.Algorithm == driver.AlgorithmSlidingWindow:
		// Remaining stays at zero until a request of one unit is allowed.
		if need != 1 || need0 != 1 {
			return Result{}, false
		}
	default:
		return Result{}, false
	}
	return later, true
}
