package sluice_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

func mustPolicyRule(t *testing.T, p sluice.Policy) sluice.Rule {
	t.Helper()
	r, err := p.Rule()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestAlgorithmPolicy: the builder refuses numbers its algorithm does not
// use, rather than ignoring them.
func TestAlgorithmPolicy(t *testing.T) {
	ok := []struct {
		a driver.Algorithm
		p driver.Params
	}{
		{driver.AlgorithmFixedWindow, driver.Params{Limit: 3, Window: time.Second}},
		{driver.AlgorithmSlidingLog, driver.Params{Limit: 3, Window: time.Second, CountRejected: true}},
		{driver.AlgorithmSlidingWindow, driver.Params{Limit: 3, Window: time.Second}},
		{driver.AlgorithmTokenBucket, driver.Params{Limit: 3, Rate: 1, Per: time.Second}},
		{driver.AlgorithmGCRA, driver.Params{Limit: 3, Rate: 1, Per: time.Second}},
		{driver.AlgorithmInFlight, driver.Params{Limit: 3, Lease: time.Minute}},
	}
	for _, c := range ok {
		pol, err := sluice.PolicyOf(c.a, c.p)
		if err != nil {
			t.Fatalf("%v %+v: %v", c.a, c.p, err)
		}
		if r := mustPolicyRule(t, pol); r.Algorithm != c.a || r.Limit != 3 {
			t.Errorf("%v %+v: rule %v", c.a, c.p, r)
		}
	}
	for _, c := range []struct {
		a driver.Algorithm
		p driver.Params
	}{
		{driver.AlgorithmFixedWindow, driver.Params{Limit: 3, Window: time.Second, Rate: 1}},
		{driver.AlgorithmSlidingWindow, driver.Params{Limit: 3, Window: time.Second, CountRejected: true}},
		{driver.AlgorithmTokenBucket, driver.Params{Limit: 3, Rate: 1, Per: time.Second, Window: time.Second}},
		{driver.AlgorithmGCRA, driver.Params{Limit: 3}},
		{driver.AlgorithmGCRA, driver.Params{Limit: 3, Rate: 1, Per: time.Second, Lease: time.Minute}},
		{driver.AlgorithmInFlight, driver.Params{Limit: 3}},
		{driver.AlgorithmInFlight, driver.Params{Limit: 3, Lease: time.Minute, Window: time.Second}},
		{driver.AlgorithmInFlight, driver.Params{Limit: 3, Lease: time.Minute, Rate: 1, Per: time.Second}},
		{driver.Algorithm(99), driver.Params{Limit: 3, Window: time.Second}},
	} {
		if _, err := sluice.PolicyOf(c.a, c.p); !errors.Is(err, sluice.ErrInvalidPolicy) {
			t.Errorf("%v %+v: %v, want ErrInvalidPolicy", c.a, c.p, err)
		}
	}
}

// TestRuleTakesWhatPolicyTakes: a rule built by hand takes CountRejected
// and a Calendar for the same algorithms as PolicyOf, with the
// same Field and reason.
func TestRuleTakesWhatPolicyTakes(t *testing.T) {
	day := sluice.Calendar{Unit: sluice.Day, Zone: time.UTC}
	for a := driver.AlgorithmFixedWindow; a <= driver.AlgorithmGCRA; a++ {
		p := driver.Params{Limit: 3, Window: time.Second}
		r := sluice.Rule{Algorithm: a, Limit: 3, Window: time.Second, Interval: time.Second}
		if a.Rated() {
			p = driver.Params{Limit: 3, Rate: 1, Per: time.Second}
			r.Window = 0
		}
		for _, tc := range []struct {
			p driver.Params
			r sluice.Rule
		}{
			{func() driver.Params { q := p; q.CountRejected = true; return q }(), func() sluice.Rule { s := r; s.CountRejected = true; return s }()},
			{func() driver.Params { q := p; q.Window, q.Calendar = 0, day; return q }(), func() sluice.Rule { s := r; s.Window, s.Calendar = 0, day; return s }()},
		} {
			_, perr := sluice.PolicyOf(a, tc.p)
			rerr := tc.r.Validate()
			if (perr == nil) != (rerr == nil) {
				t.Errorf("%v: Policy(%+v): %v, but Rule %v: %v", a, tc.p, perr, tc.r, rerr)
				continue
			}
			var pe, re *sluice.PolicyError
			if perr != nil && (!errors.As(perr, &pe) || !errors.As(rerr, &re) || pe.Field != re.Field || pe.Reason != re.Reason) {
				t.Errorf("%v: Policy %v and Rule %v refuse differently", a, perr, rerr)
			}
		}
	}
}
