package benchmarks

import (
	"fmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// PolicyOf returns the Policy of algorithm a with the numbers of p,
// validated, as the service's configuration builds it
// (cmd/sluice/internal/config.PolicyOf).
func PolicyOf(a driver.Algorithm, p driver.Params) (sluice.Policy, error) {
	var pol sluice.Policy
	switch a {
	case driver.AlgorithmFixedWindow:
		pol = sluice.FixedWindow{Limit: p.Limit, Window: p.Window, Calendar: p.Calendar, CountRejected: p.CountRejected}
	case driver.AlgorithmSlidingLog:
		pol = sluice.SlidingLog{Limit: p.Limit, Window: p.Window, CountRejected: p.CountRejected}
	case driver.AlgorithmSlidingWindow:
		pol = sluice.SlidingWindow{Limit: p.Limit, Window: p.Window}
	case driver.AlgorithmTokenBucket:
		pol = sluice.TokenBucket{Capacity: p.Limit, Rate: p.Rate, Per: p.Per}
	case driver.AlgorithmGCRA:
		pol = sluice.GCRA{Rate: p.Rate, Per: p.Per, Burst: p.Limit}
	case driver.AlgorithmInFlight:
		pol = sluice.InFlight{Limit: p.Limit, Lease: p.Lease}
	default:
		return nil, &sluice.PolicyError{Err: sluice.ErrInvalidPolicy, Reason: fmt.Sprintf("unknown algorithm %v", a)}
	}
	if err := a.Takes(p); err != nil {
		return nil, err
	}
	if _, err := pol.Rule(); err != nil {
		return nil, err
	}
	return pol, nil
}
