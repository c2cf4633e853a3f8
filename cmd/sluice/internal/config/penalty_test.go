package config

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestPenaltyRefused: a penalty sluice.WithPenalty would refuse is refused
// at load, naming the field.
func TestPenaltyRefused(t *testing.T) {
	for _, tc := range []struct{ name, penalty, want string }{
		{"after zero", "{after: 0, within: 1m, block: 1m}", "penalty.after must be between 1 and"},
		{"after missing", "{within: 1m, block: 1m}", "penalty.after is required"},
		{"within missing", "{after: 5, block: 1m}", "penalty.within is required"},
		{"block missing", "{after: 5, within: 1m}", "penalty.block is required"},
		{"block too short", "{after: 5, within: 1m, block: 1us}", "penalty.block must be between 1ms"},
		{"max_block below block", "{after: 5, within: 1m, block: 2m, max_block: 1m}", "penalty.max_block (1m0s) must be at least penalty.block (2m0s)"},
		{"growth without forgive", "{after: 5, within: 1m, block: 1m, max_block: 4m}", "penalty.forgive is required"},
		{"forgive without growth", "{after: 5, within: 1m, block: 1m, forgive: 1h}", "penalty.forgive has no effect"},
		{"unknown field", "{after: 5, within: 1m, block: 1m, ban: 1h}", "ban"},
		{"not a mapping", "5", "penalty"},
	} {
		y := "policies:\n  - {name: p, algorithm: fixed_window, limit: 10, window: 1m, penalty: " + tc.penalty + "}\n"
		_, err := Parse("bad.yaml", []byte(y))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	_, err := Parse("bad.yaml", []byte("policies:\n  - {name: p, algorithm: in_flight, limit: 10, lease: 1m, penalty: {after: 1, within: 1m, block: 1m}}\n"))
	if err == nil || !strings.Contains(err.Error(), "penalty is not used by in_flight") {
		t.Errorf("in_flight: %v", err)
	}
}

// TestPenaltyDecoded: the fields land in Policy.Penalty, and a policy an
// Envoy descriptor uses may have one (its refusals are OVER_LIMIT, blocked
// or not).
func TestPenaltyDecoded(t *testing.T) {
	c, err := Parse("ok.yaml", []byte("policies:\n  - {name: p, algorithm: gcra, burst: 10, rate: 1/s, penalty: {after: 5, within: 1m, block: 1m, max_block: 16m, forgive: 24h}}\n"+
		"domains:\n  - domain: d\n    descriptors:\n      - {key: k, policy: p}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := sluice.Penalty{After: 5, Within: time.Minute, Block: time.Minute, MaxBlock: 16 * time.Minute, Forgive: 24 * time.Hour}
	if p := c.Policy("p"); p.Penalty == nil || *p.Penalty != want {
		t.Fatalf("%+v", p.Penalty)
	}
	if c, err = Parse("ok.yaml", []byte("policies:\n  - {name: p, algorithm: gcra, burst: 10, rate: 1/s}\n")); err != nil || c.Policy("p").Penalty != nil {
		t.Fatalf("no penalty: %v %+v", err, c)
	}
}
