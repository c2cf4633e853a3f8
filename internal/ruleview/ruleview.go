// Package ruleview computes, from a limiter's Rule and a Result, what
// headers and reports show: the rule in force and the time to the next unit.
// httplimit exports them; sluicetest checks them against the stores.
package ruleview

import (
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// InForce returns the rule that decided res, r being the rule the
// decision was asked under (the limiter's policy or the plan it named):
// r itself, or r with the limit and parameter of the override that
// decided (Result.Limit and Result.OverrideParam, as the store applied
// them). It is what headers and reports show as the key's limit and
// window, computed by the same Overridden the stores apply.
func InForce(r sluice.Rule, res sluice.Result) sluice.Rule {
	if res.Source != sluice.SourceOverride || res.Limit <= 0 {
		return r
	}
	out, err := r.Overridden(res.Limit, res.OverrideParam)
	if err != nil {
		// A store never reports an override it could not apply; keep at
		// least its limit.
		r.Limit = res.Limit
		return r
	}
	return out
}

// NextUnit returns how long after res, a Result of rule r for a request of
// cost, the key has more than res.Remaining units again: the "t" of the
// RateLimit header field (draft-ietf-httpapi-ratelimit-headers: the time
// until additional quota is made available). known is false when res does
// not determine it:
//
//   - nothing is taken (Remaining is Limit), or res is Degraded;
//   - for InFlight, whose leases may be released at any time;
//   - for SlidingLog and SlidingWindow, whose Result does not say when the
//     oldest counted unit leaves the window, except after a refusal of
//     cost 1 or a peek (then it is RetryAfter) and, for SlidingLog, with a
//     single unit logged (then it is ResetAfter).
//
// FixedWindow restores everything at the window's end (ResetAfter);
// TokenBucket and GCRA earn the next unit within one Interval.
func NextUnit(r sluice.Rule, res sluice.Result, cost int64) (d time.Duration, known bool) {
	if res.Degraded || res.Remaining >= r.Limit || r.Algorithm == driver.AlgorithmInFlight {
		// For InFlight: a lease may be released at any time.
		return 0, false
	}
	if res.Blocked {
		// Blocked by a penalty: nothing until the block ends.
		return res.RetryAfter, res.RetryAfter > 0
	}
	if !res.Allowed && cost <= 1 {
		// One unit short: the time until one more is there.
		return res.RetryAfter, res.RetryAfter > 0
	}
	switch r.Algorithm {
	case driver.AlgorithmFixedWindow:
		d = res.ResetAfter
	case driver.AlgorithmTokenBucket, driver.AlgorithmGCRA:
		// ResetAfter earns Limit-Remaining units back, the last of them
		// Interval apart: the first comes once the others' time is left.
		d = res.ResetAfter - time.Duration(r.Limit-res.Remaining-1)*r.Interval
	case driver.AlgorithmSlidingLog:
		if r.Limit-res.Remaining == 1 {
			d = res.ResetAfter
		}
	}
	return d, d > 0
}
