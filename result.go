package sluice

import "time"

// Result is the outcome of one decision.
type Result struct {
	// Allowed reports whether the request may proceed. In shadow mode it is
	// always true; Shadowed then says whether the limit would have refused.
	Allowed bool

	// Limit is the policy's limit: units per window, or the bucket capacity
	// or burst for TokenBucket and GCRA.
	Limit int64

	// Remaining is how many more units would be allowed right now, after
	// this request. Never negative.
	Remaining int64

	// RetryAfter is zero when the request was allowed. Otherwise it is the
	// earliest time after which the same request would be allowed, if
	// nothing else is taken meanwhile: a client that waits exactly
	// RetryAfter and retries is allowed.
	RetryAfter time.Duration

	// ResetAfter is the time until the limit is fully restored (Remaining
	// back to Limit) if nothing else is taken. Zero when it already is.
	ResetAfter time.Duration

	// Degraded reports that the store could not decide (timeout, network or
	// server error, open circuit breaker) and the limiter's fail mode did:
	// Allowed is then true for FailOpen, and false for FailClosed with a
	// RetryAfter of one second. Remaining and ResetAfter are then zero.
	Degraded bool

	// Shadowed reports that the limit refused the request but the limiter is
	// in shadow mode, so Allowed is true anyway.
	Shadowed bool

	// Source says which limit decided: the key's override, the plan the
	// decision named, or the limiter's policy.
	Source LimitSource

	// OverrideParam is, when an override decided (Source is
	// SourceOverride), the parameter it decided with, as Rule.Param gives
	// it: the window, or the interval of TokenBucket and GCRA, in
	// microseconds (the rule's own when the override set none; 0 for
	// calendar periods). Otherwise 0. httplimit.InForce gives the whole rule
	// that decided, for headers and reports.
	OverrideParam int64

	// OverrideInvalid reports that the key has an override the store could
	// not use (malformed in Valkey): the plan or policy decided instead.
	OverrideInvalid bool

	// Blocked reports a refusal by the limiter's penalty (WithPenalty):
	// the key is blocked. RetryAfter and ResetAfter are then the time left
	// of the block, and Remaining is 0; when the block ends the policy
	// decides again (and may still refuse, if its window outlasts the
	// block). In shadow mode Allowed is true and Shadowed set, and Blocked
	// says the key would have been blocked.
	Blocked bool

	// BlockStarted reports that this decision's refusal started the block
	// (the Penalty.After-th refusal within Penalty.Within): Blocked is set
	// too. Observers count blocks by it.
	BlockStarted bool

	// Warning reports an allowed decision that used at least the
	// limiter's warning threshold of the limit (WithWarning): the key is
	// close to its first refusal. Never set on a refusal or a degraded
	// decision.
	Warning bool
}

// LimitSource says which limit decided a Result: precedence is a key's
// override, then the key's plan, then the limiter's policy.
type LimitSource uint8

// The sources of a limit.
const (
	SourcePolicy LimitSource = iota
	SourcePlan
	SourceOverride
)

// String returns "policy", "plan" or "override".
func (s LimitSource) String() string {
	switch s {
	case SourcePlan:
		return "plan"
	case SourceOverride:
		return "override"
	}
	return "policy"
}
