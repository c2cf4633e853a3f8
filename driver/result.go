package driver

import "time"

// Result is what a Store fills in for one Op: the decision and, when the
// key's override decided, the override's limit and parameter. The limiter
// completes it into the Result its callers see (sluice.Result: the limit,
// which limit decided, and the fail and shadow modes).
type Result struct {
	// Allowed reports whether the request may proceed.
	Allowed bool

	// Remaining is how many more units would be allowed right now, after
	// this request. Never negative.
	Remaining int64

	// RetryAfter is zero when the request was allowed. Otherwise it is the
	// earliest time after which the same request would be allowed, if
	// nothing else is taken meanwhile.
	RetryAfter time.Duration

	// ResetAfter is the time until the limit is fully restored if nothing
	// else is taken. Zero when it already is.
	ResetAfter time.Duration

	// Override reports that the key's override decided (see Op.Override):
	// OverrideLimit and OverrideParam are then the limit and the parameter
	// it decided with.
	Override bool

	// OverrideLimit is, when Override is set, the override's limit.
	OverrideLimit int64

	// OverrideParam is, when Override is set, the parameter the override
	// decided with, as Rule.Param gives it: the window, or the interval of
	// TokenBucket and GCRA, in microseconds (the rule's own when the
	// override set none; 0 for calendar periods).
	OverrideParam int64

	// OverrideInvalid reports that the key has an override the store could
	// not use (malformed): the Op's Rule decided instead.
	OverrideInvalid bool

	// Blocked reports a refusal by the Op's Penalty: the key is blocked,
	// RetryAfter and ResetAfter are the time left of the block and
	// Remaining is 0. BlockStarted reports that this decision's refusal
	// started the block (the Penalty.After-th refusal in its window);
	// Blocked is then set too.
	Blocked      bool
	BlockStarted bool

	// Expired is, for an AlgorithmInFlight Op, how many of the key's
	// leases the store reaped in this decision because they had ended by
	// expiry (Window passed without a release or renewal): each such lease
	// is counted once, by the decision that reaps it. A released lease, or
	// one removed by a reset of its key, is not counted; nor are the leases
	// of a key that expired whole before it was decided on again. 0 for
	// the other algorithms.
	Expired int64
}
