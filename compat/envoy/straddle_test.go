package envoy_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestStraddleFromRunnerSpans: a case's span is read from the runner's
// markers in its output (first start, last stop), and a case straddles
// exactly when a minute edge falls inside that span; a case without
// both markers never counts as straddling (so it is never re-run).
func TestStraddleFromRunnerSpans(t *testing.T) {
	edge := time.Date(2026, 1, 2, 3, 5, 0, 0, time.UTC)
	event := func(test, out string) string {
		return fmt.Sprintf(`{"Action":"output","Test":%q,"Output":%q}`, test, out)
	}
	for _, tc := range []struct {
		name       string
		start, end time.Time
		markers    bool
		want       bool
	}{
		{"inside one minute", edge.Add(-5 * time.Second), edge.Add(-time.Millisecond), true, false},
		{"over the edge", edge.Add(-time.Second), edge.Add(2 * time.Second), true, true},
		{"starting on the edge", edge, edge.Add(3 * time.Second), true, false},
		{"ending on the edge", edge.Add(-3 * time.Second), edge, true, true},
		{"without markers", edge.Add(-time.Second), edge.Add(2 * time.Second), false, false},
	} {
		var lines []string
		lines = append(lines, `{"Action":"run","Test":"TestX/A"}`)
		if tc.markers {
			lines = append(lines,
				event("TestX/A", fmt.Sprintf("SLUICE-COMPAT-SPAN-START %d\n", tc.start.UnixNano())),
				event("TestX/A", fmt.Sprintf("SLUICE-COMPAT-SPAN-START %d\n", tc.start.Add(time.Second).UnixNano())),
				event("TestX/A", fmt.Sprintf("SLUICE-COMPAT-SPAN-END %d\n", tc.start.Add(time.Second).UnixNano())),
				event("TestX/A", fmt.Sprintf("SLUICE-COMPAT-SPAN-END %d\n", tc.end.UnixNano())))
		}
		lines = append(lines, `{"Action":"fail","Test":"TestX/A"}`)
		leaves, _ := parseEvents(t, []byte(strings.Join(lines, "\n")))
		if len(leaves) != 1 {
			t.Fatalf("%s: %d leaves", tc.name, len(leaves))
		}
		c := leaves[0]
		if got := c.straddles(); got != tc.want {
			t.Errorf("%s: straddles() = %v, want %v (span %s)", tc.name, got, tc.want, c.span())
		}
		if tc.markers && (!c.start.Equal(tc.start) || !c.end.Equal(tc.end)) {
			t.Errorf("%s: span %v-%v, want %v-%v", tc.name, c.start, c.end, tc.start, tc.end)
		}
		if classify(c) != "failing" {
			t.Errorf("%s: a failing case classifies as %s", tc.name, classify(c))
		}
	}
}
