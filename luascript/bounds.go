package luascript

import (
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// CalendarBounds returns, for a rule with calendar periods, the first
// instants of four consecutive periods in microseconds since the Unix
// epoch: the one before the period that holds now, that period, and the
// two after. It is the parameter the scripts take instead of the rule's
// Param: a script picks the period with its own clock (Valkey's TIME,
// which a zone database cannot reach), so that clock may differ from now
// by up to a period. memstore picks among the same four.
func CalendarBounds(r *sluice.Rule, now time.Time) [4]int64 {
	// From instants, not dates: a date a zone skipped (Apia's December
	// 30th, 2011) is no period.
	s1, s2 := r.Calendar.Span(now)
	s0, _ := r.Calendar.Span(s1.Add(-time.Nanosecond))
	_, s3 := r.Calendar.Span(s2)
	return [4]int64{s0.UnixMicro(), s1.UnixMicro(), s2.UnixMicro(), s3.UnixMicro()}
}

// OverrideBounds are the bounds within which a script accepts an override
// it reads for r, the same as sluice.Rule.Overridden's: the largest limit,
// the least and largest parameter in microseconds (0 and 0 when only the
// limit may change), and the largest limit × parameter (0 for no bound).
func OverrideBounds(r *sluice.Rule) [4]int64 {
	b := [4]int64{driver.MaxLimit, 0, 0, 0}
	if r.Algorithm == driver.AlgorithmSlidingLog {
		b[0] = driver.MaxSlidingLogLimit
	}
	switch {
	case !r.Calendar.IsZero():
	case r.Algorithm.Rated():
		b[1], b[2], b[3] = 1, driver.MaxWindow.Microseconds(), driver.MaxWindow.Microseconds()
	default:
		b[1], b[2] = driver.MinWindow.Microseconds(), driver.MaxWindow.Microseconds()
	}
	return b
}
