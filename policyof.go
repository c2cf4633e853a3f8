package sluice

import (
	"fmt"

	"github.com/sluicehq/sluice/driver"
)

// PolicyOf returns the Policy of algorithm a with the numbers of p,
// validated: a policy read from a configuration (algorithm by name,
// driver.ParseAlgorithm, and its numbers). p's fields that a does not take
// are refused, never ignored.
func PolicyOf(a driver.Algorithm, p driver.Params) (Policy, error) {
	var pol Policy
	switch a {
	case driver.AlgorithmFixedWindow:
		pol = FixedWindow{Limit: p.Limit, Window: p.Window, Calendar: p.Calendar, CountRejected: p.CountRejected}
	case driver.AlgorithmSlidingLog:
		pol = SlidingLog{Limit: p.Limit, Window: p.Window, CountRejected: p.CountRejected}
	case driver.AlgorithmSlidingWindow:
		pol = SlidingWindow{Limit: p.Limit, Window: p.Window}
	case driver.AlgorithmTokenBucket:
		pol = TokenBucket{Capacity: p.Limit, Rate: p.Rate, Per: p.Per}
	case driver.AlgorithmGCRA:
		pol = GCRA{Rate: p.Rate, Per: p.Per, Burst: p.Limit}
	case driver.AlgorithmInFlight:
		pol = InFlight{Limit: p.Limit, Lease: p.Lease}
	default:
		return nil, &PolicyError{Err: ErrInvalidPolicy, Reason: fmt.Sprintf("unknown algorithm %v", a)}
	}
	if err := a.Takes(p); err != nil {
		return nil, err
	}
	if _, err := pol.Rule(); err != nil {
		return nil, err
	}
	return pol, nil
}
