package sluice_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// The named under-admission scenarios of docs/grants.md, on the simulated
// fleet of TestGrantsNeverOverAdmit with a fixed seed: steady demand above
// the limit, skewed demand, a process joining a saturated key, and one
// leaving it (Close, and a crash). Each checks zero over-admission against
// the exact algorithm and the shortfall against the published bound, and
// reports the figures docs/grants.md publishes.

// A grantScenario is a fleet's demand and what happens halfway through.
type grantScenario struct {
	name  string
	rates []float64 // the processes' requests per second from the start
	// event, at scenarioEvent, returns the process that joined or left
	// (nil for none), whether it left, and when its wait began.
	event func(s *sim) (p *simProc, left bool, at time.Time)
}

const (
	scenarioSpan  = 2 * time.Second
	scenarioEvent = 1050 * time.Millisecond // mid-window
	scenarioLife  = 200 * time.Millisecond
	scenarioLat   = 500 * time.Microsecond // each way; three make δ
	scenarioSeed  = 1
)

// Four processes asking 600 requests per second each, of 1 to 3 units,
// are 4.8 times the bucket's rate and the window's limit.
var saturated = []float64{600, 600, 600, 600}

var grantScenarios = []grantScenario{
	{name: "steady", rates: saturated},
	{name: "skewed", rates: []float64{2000, 30, 30, 30}},
	{name: "join", rates: saturated, event: func(s *sim) (*simProc, bool, time.Time) {
		p := s.newProc(600, simMaxCost)
		s.join(p)
		return p, false, s.clock.Now()
	}},
	// Close waits for the leaver's call in flight, if any; the simulation
	// runs every process's calls in flight then, one after another, on its
	// clock (drain), so the wait is measured from the moment none is in
	// flight: the give-back's one way to the store.
	{name: "leave", rates: saturated, event: func(s *sim) (*simProc, bool, time.Time) {
		s.drain()
		at := s.clock.Now()
		s.leave(s.ps[0])
		return s.ps[0], true, at
	}},
	// A call in flight at the crash still reaches the store (within two
	// latencies: its wait to start and its way) and extends the grant.
	{name: "crash", rates: saturated, event: func(s *sim) (*simProc, bool, time.Time) {
		s.crash(s.ps[0])
		return s.ps[0], true, s.clock.Now()
	}},
}

// scenarioPolicies: a bucket of 1,000 per second and burst 100 (token
// bucket and GCRA are the same bucket under grants), and a window of 100
// per 100ms.
var scenarioPolicies = []sluice.Policy{
	sluice.GCRA{Rate: 1000, Per: time.Second, Burst: 100},
	sluice.FixedWindow{Limit: 100, Window: 100 * time.Millisecond},
}

// scenarioFigures is one scenario's measurement: the shortfall over the
// span, and the one checked against the bound (a window: the window
// closest to its bound).
type scenarioFigures struct {
	exact, admitted int64
	checked         under
	voided          int64
	calls           int
	// wait is, for a joiner, the time until it first held units; for a
	// leaver, until the store no longer counted its units (-1: never).
	wait time.Duration
}

// TestGrantScenarios runs the scenarios for each policy and prints the
// table docs/grants.md publishes (go test -run TestGrantScenarios -v .).
func TestGrantScenarios(t *testing.T) {
	var table strings.Builder
	table.WriteString("| policy | scenario | exact | admitted | short | short ≤ bound | voided | calls | wait |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, pol := range scenarioPolicies {
		rule, err := pol.Rule()
		if err != nil {
			t.Fatal(err)
		}
		for _, sc := range grantScenarios {
			f := runScenario(t, pol, rule, sc)
			wait := "-"
			if sc.event != nil {
				wait = f.wait.Round(time.Microsecond).String()
			}
			short := f.exact - f.admitted
			fmt.Fprintf(&table, "| %s | %s | %d | %d | %d (%.1f%%) | %d ≤ %d | %d | %d | %s |\n", rule.Algorithm, sc.name,
				f.exact, f.admitted, short, 100*float64(short)/float64(max(f.exact, 1)), f.checked.short, f.checked.bound, f.voided, f.calls, wait)
		}
	}
	t.Log("\n" + table.String())
}

// runScenario runs sc on rule and checks it: no over-admission, the
// shortfall within the bound, the join or leave wait within its own
// (checkWait).
func runScenario(t *testing.T, pol sluice.Policy, rule sluice.Rule, sc grantScenario) scenarioFigures {
	t.Helper()
	s := newSim(t, rand.New(rand.NewPCG(scenarioSeed, 0)), pol, sluice.GrantOptions{Life: scenarioLife}, scenarioLat)
	defer s.restore()
	for _, r := range sc.rates {
		s.join(s.newProc(r, simMaxCost))
	}
	start := s.clock.Now()
	s.run(start.Add(scenarioEvent), nil, nil)
	f := scenarioFigures{wait: -1}
	if sc.event != nil {
		p, left, at := sc.event(s)
		s.run(start.Add(scenarioSpan), nil, nil)
		f.wait = s.scenarioWait(p, left, at)
	}
	s.run(start.Add(scenarioSpan), nil, nil)
	res := s.finish()
	if units, i := exactAdmits(rule, res.admitted); i >= 0 {
		t.Fatalf("%v, %s: the exact policy refuses admission %d of %d (at %dµs): over-admission", rule, sc.name, i, len(res.admitted), res.admitted[i].at)
	} else if err := envelope(rule, res.admitted); err != nil {
		t.Fatalf("%v, %s: %v (%d units)", rule, sc.name, err, units)
	}
	f.checked, f.voided, f.calls = checkUnder(t, scenarioSeed, rule, res, scenarioLat), res.voided, res.calls
	f.exact, _ = exactAdmits(rule, res.requests)
	for _, a := range res.admitted {
		f.admitted += a.cost
	}
	checkWait(t, rule, sc, f.wait)
	return f
}

// checkWait checks a scenario's join or leave wait: a leaver's units back
// within the give-back's latency (Close) or a grant's life after a call in
// flight reached the store (a crash), a joiner served before the span
// ends.
func checkWait(t *testing.T, rule sluice.Rule, sc grantScenario, wait time.Duration) {
	t.Helper()
	limit := map[string]time.Duration{"leave": scenarioLat, "crash": scenarioLife + 2*scenarioLat, "join": scenarioSpan - scenarioEvent}[sc.name]
	if sc.event != nil && (wait < 0 || wait > limit) {
		t.Errorf("%v, %s: waited %v (-1: never), more than %v", rule, sc.name, wait, limit)
	}
}

// scenarioWait is, for a joiner, the time from at until it first held
// units; for a leaver, until the store no longer counted its units (its
// give-back ran, or its last grant ended); -1 if never.
func (s *sim) scenarioWait(p *simProc, left bool, at time.Time) time.Duration {
	h := s.store.seen[p.l.GrantHolder()]
	switch {
	case h == nil:
		return -1
	case !left && h.first.IsZero():
		return -1
	case !left:
		return h.first.Sub(at)
	case !h.back.Before(at):
		return h.back.Sub(at)
	}
	return max(0, h.end.Sub(at))
}
