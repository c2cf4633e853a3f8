package sluice

// The warning before the limit (WithWarning).

// WithWarning sets the limiter's warning threshold: an allowed decision
// that leaves at least percent of the limit in force used (Limit −
// Remaining, this request included) has Result.Warning set, so that a
// client or an operator learns of the limit before the first refusal.
// percent is a whole number from 1 to 99; by default (0) there is no
// warning. The edge is exact: with a limit of 10 and 80 percent, the
// decision that leaves 2 units warns and the one that leaves 3 does not
// (used × 100 ≥ percent × Limit, in integers). New refuses a percent out
// of range, and a warning on an InFlight limiter (a rate limit's
// threshold; sluice serve refuses warn_at on in_flight alike).
func WithWarning(percent int) Option {
	return optionFunc(func(c *config) { c.warn, c.warnSet = percent, true })
}

// checkWarning refuses a WithWarning percent out of 1 to 99.
func checkWarning(c *config) error {
	if c.warnSet && (c.warn < 1 || c.warn > 99) {
		return invalidField("WithWarning", "WithWarning: percent must be a whole number from 1 to 99, got %d", c.warn)
	}
	return nil
}

// warns reports whether res, as the store decided it, crosses the
// limiter's warning threshold: allowed, and at least warn percent of its
// limit used.
func (l *Limiter) warns(res Result) bool {
	if l.cfg.warn == 0 || !res.Allowed || res.Limit <= 0 {
		return false
	}
	used := res.Limit - res.Remaining
	// Limit is at most driver.MaxLimit (2^40): × 100 stays exact.
	return used*100 >= int64(l.cfg.warn)*res.Limit
}

// WarningPercent returns the limiter's warning threshold (WithWarning), 0
// for none.
func (l *Limiter) WarningPercent() int {
	if l.ready() != nil {
		return 0
	}
	return l.cfg.warn
}
