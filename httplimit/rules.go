package httplimit

import (
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/ruleview"
)

// InForce returns the rule that decided res, r being the rule the
// decision was asked under (the limiter's policy or the plan it named):
// r itself, or r with the limit and parameter of the override that
// decided (Result.Limit and Result.OverrideParam, as the store applied
// them). It is what headers and reports show as the key's limit and
// window, computed by the same Rule.Overridden the stores apply.
func InForce(r sluice.Rule, res sluice.Result) sluice.Rule { return ruleview.InForce(r, res) }

// NextUnit returns how long after res, a Result of rule r for a request of
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
func NextUnit(r sluice.Rule, res sluice.Result, cost int64) (d time.Duration, known bool) {
	return ruleview.NextUnit(r, res, cost)
}
