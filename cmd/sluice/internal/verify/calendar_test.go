package verify_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/valkeytest"
)

// TestCalendarPolicies: verify passes on calendar quotas (the boundary
// check uses the period's real end).
func TestCalendarPolicies(t *testing.T) {
	srv := valkeytest.Start(t)
	cfg := loadConfig(t, []string{srv.Addr}, `
policies:
  - {name: daily, algorithm: fixed_window, limit: 10, period: day, zone: America/Los_Angeles}
  - {name: monthly, algorithm: fixed_window, limit: 10, period: month, zone: Europe/Paris, renewal_day: 31}
`)
	rep := run(t, opts(cfg))
	if out := text(rep); !rep.Passed || !strings.Contains(out, "PASS: 2 policies") {
		t.Fatalf("want a pass:\n%s", out)
	}
}
