package sluiceotel_test

import (
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/sluiceotel"
)

// TestDocumented: every attribute and metric sluiceotel exports is a row of
// docs/observability.md's tables.
func TestDocumented(t *testing.T) {
	b, err := os.ReadFile("../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if name, ok := strings.CutPrefix(line, "| `"); ok {
			name, _, _ = strings.Cut(name, "`")
			rows[name] = true
		}
	}
	for _, a := range []string{
		string(sluiceotel.AttrPolicy), string(sluiceotel.AttrAlgorithm), string(sluiceotel.AttrDecision),
		string(sluiceotel.AttrOutcome), string(sluiceotel.AttrAnsweredBy), string(sluiceotel.AttrLimitSource),
		string(sluiceotel.AttrCost), string(sluiceotel.AttrLimit), string(sluiceotel.AttrRemaining),
		string(sluiceotel.AttrRetryAfter), string(sluiceotel.AttrShadow), string(sluiceotel.AttrKeyHash),
		string(sluiceotel.AttrErrorType), string(sluiceotel.AttrGrantEvent), string(sluiceotel.AttrGrantWhere),
		"sluice.decisions", "sluice.store.errors", "sluice.decision.duration", "sluice.breaker.state",
		"sluice.grant.calls", "sluice.grants", "sluice.grant.units", "sluice.grant.decisions", "sluice.grant.mixed", "sluice.grant.keys",
	} {
		if !rows[a] {
			t.Errorf("docs/observability.md has no row for %s", a)
		}
	}
	if !strings.Contains(string(b), string(sluiceotel.AttrNode)) || !strings.Contains(string(b), string(sluiceotel.AttrBreakerState)) {
		t.Error("docs/observability.md does not name the breaker gauge's attributes")
	}
}
