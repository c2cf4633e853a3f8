package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseRate parses a rate such as "5/s", "100/m", "1000/h", "20000/d" or
// "0.5/s" into events per period. Units: s (second), m (minute), h (hour),
// d (day); the long forms "sec", "second", "min", "minute", "hour", "day"
// are accepted too.
func ParseRate(s string) (float64, time.Duration, error) {
	num, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, 0, fmt.Errorf("rate %q must look like 5/s, 100/m, 1000/h or 20000/d", s)
	}
	num, unit = strings.TrimSpace(num), strings.TrimSpace(unit)
	n, err := rateNumber(s, num)
	if err != nil {
		return 0, 0, err
	}
	per, ok := rateUnits[unit]
	if !ok {
		return 0, 0, fmt.Errorf("rate %q: unknown unit %q (want s, m, h or d)", s, unit)
	}
	return n, per, nil
}

// rateUnits are the periods a rate's unit names.
var rateUnits = map[string]time.Duration{
	"s": time.Second, "sec": time.Second, "second": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute,
	"h": time.Hour, "hour": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour,
}

// rateNumber parses num, the count of rate s: a positive decimal number
// (no exponent, hexadecimal, NaN or infinity).
func rateNumber(s, num string) (float64, error) {
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(n) || math.IsInf(n, 0) || strings.ContainsAny(num, "eExXpP") {
		return 0, fmt.Errorf("rate %q: %q is not a number", s, num)
	}
	if n <= 0 {
		return 0, fmt.Errorf("rate %q must be positive", s)
	}
	return n, nil
}

// ParseDuration parses a Go duration ("150ms", "15m", "1h30m") with one
// addition: a whole number of days, "7d". A bare number is refused: the unit
// is the part people get wrong.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if days, ok := strings.CutSuffix(s, "d"); ok && days != "" {
		return parseDays(s, days)
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil && s != "0" {
		return 0, fmt.Errorf("duration %q has no unit (write %sms, %ss, %sm, ...)", s, s, s, s)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("duration %q is not valid (examples: 50ms, 2s, 15m, 1h, 7d)", s)
	}
	return d, nil
}

// parseDays parses days, the number of duration s ("7d"): a whole
// number from 1 to 10000.
func parseDays(s, days string) (time.Duration, error) {
	n, err := strconv.ParseInt(days, 10, 64)
	if err != nil || n <= 0 || n > 10000 {
		return 0, fmt.Errorf("duration %q: days must be a whole number from 1 to 10000", s)
	}
	return time.Duration(n) * 24 * time.Hour, nil
}
