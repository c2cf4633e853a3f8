package sluice_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

func mustRule(t *testing.T, p sluice.Policy) sluice.Rule {
	t.Helper()
	r, err := p.Rule()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRulePeriod: one rounding of the period shown to clients, exact.
func TestRulePeriod(t *testing.T) {
	for _, c := range []struct {
		p       sluice.Policy
		period  time.Duration
		seconds int64
		ttl     time.Duration
	}{
		{sluice.TokenBucket{Capacity: 10, Rate: 10, Per: time.Second}, time.Second, 1, 2 * time.Second},
		{sluice.TokenBucket{Capacity: 3, Rate: 3, Per: time.Second}, 999999 * time.Microsecond, 1, 2 * time.Second},
		{sluice.GCRA{Rate: 10, Per: time.Second, Burst: 25}, 2500 * time.Millisecond, 3, 3500 * time.Millisecond},
		{sluice.FixedWindow{Limit: 5, Window: 1500 * time.Microsecond}, 1500 * time.Microsecond, 1, 1002 * time.Millisecond},
		{sluice.SlidingWindow{Limit: 5, Window: time.Minute}, time.Minute, 60, 2*time.Minute + time.Second},
		{sluice.SlidingLog{Limit: 5, Window: time.Minute}, time.Minute, 60, time.Minute + time.Second},
	} {
		r := mustRule(t, c.p)
		if r.Period() != c.period || r.TTL() != c.ttl || max(1, (r.Period()+time.Second-1)/time.Second) != time.Duration(c.seconds) {
			t.Errorf("%v: Period %v, TTL %v; want %v (%ds rounded up), %v", r, r.Period(), r.TTL(), c.period, c.seconds, c.ttl)
		}
	}
}

// TestRuleStateAndName: every algorithm keeps its state under its own key
// part, and default names differ when policies do.
func TestRuleStateAndName(t *testing.T) {
	states, names := map[string]sluice.Rule{}, map[string]sluice.Rule{}
	for _, p := range []sluice.Policy{
		sluice.FixedWindow{Limit: 5, Window: time.Second},
		sluice.SlidingLog{Limit: 5, Window: time.Second},
		sluice.SlidingWindow{Limit: 5, Window: time.Second},
		sluice.TokenBucket{Capacity: 5, Rate: 5, Per: time.Second},
		sluice.GCRA{Rate: 5, Per: time.Second, Burst: 5},
	} {
		r := mustRule(t, p)
		if o, ok := states[r.State()]; ok {
			t.Errorf("%v and %v share the state %q", r, o, r.State())
		}
		states[r.State()] = r
		if o, ok := names[sluice.DefaultName(r)]; ok {
			t.Errorf("%v and %v share the name %q", r, o, sluice.DefaultName(r))
		}
		names[sluice.DefaultName(r)] = r
		if err := r.Validate(); err != nil {
			t.Errorf("%v: %v", r, err)
		}
		k1 := driver.Key("p", "n", r, "id")
		for _, o := range states {
			if o.Algorithm != r.Algorithm && driver.Key("p", "n", o, "id") == k1 {
				t.Errorf("%v and %v share the key %q", r, o, k1)
			}
		}
	}
	slc := mustRule(t, sluice.SlidingLog{Limit: 5, Window: time.Second, CountRejected: true})
	if sluice.DefaultName(slc) == sluice.DefaultName(names[slc.State()]) {
		t.Errorf("count_rejected shares the default name %q", sluice.DefaultName(slc))
	}
}

// TestDocStates: the state names docs/guarantees.md lists in its Keys
// paragraph are those Rule.State gives, every algorithm's and the calendar
// windows'.
func TestDocStates(t *testing.T) {
	readme, err := os.ReadFile("docs/guarantees.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("algorithm and its state format \\(((?:`[a-z0-9]+`,\\s+)*`[a-z0-9]+`):").FindSubmatch(readme)
	if m == nil {
		t.Fatal("docs/guarantees.md no longer lists the state names")
	}
	var listed []string
	for _, f := range strings.Fields(string(m[1])) {
		listed = append(listed, strings.Trim(f, "`,"))
	}
	var states []string
	for _, p := range []sluice.Policy{
		sluice.FixedWindow{Limit: 5, Window: time.Second},
		sluice.FixedWindow{Limit: 5, Calendar: sluice.Calendar{Unit: sluice.Day, Zone: time.UTC}},
		sluice.SlidingLog{Limit: 5, Window: time.Second},
		sluice.SlidingWindow{Limit: 5, Window: time.Second},
		sluice.TokenBucket{Capacity: 5, Rate: 5, Per: time.Second},
		sluice.GCRA{Rate: 5, Per: time.Second, Burst: 5},
	} {
		states = append(states, mustRule(t, p).State())
	}
	if !slices.Equal(listed, states) {
		t.Errorf("docs/guarantees.md lists the states %q, Rule.State gives %q", listed, states)
	}
}
