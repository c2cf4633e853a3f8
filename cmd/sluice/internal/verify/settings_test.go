package verify_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/valkeytest"
)

// shortPolicy is one quick policy: the settings checks are the subject.
const shortPolicy = `
policies:
  - {name: api, algorithm: gcra, burst: 5, rate: 50/s}
`

// TestEvictingPolicyFails: on a Valkey with maxmemory-policy allkeys-lru
// (which evicts limiter keys, each then starting again with its full
// limit) verify fails, naming the setting, though every policy check
// passes. Before, only doctor caught it.
func TestEvictingPolicyFails(t *testing.T) {
	srv := valkeytest.Start(t, "--maxmemory-policy", "allkeys-lru")
	o := opts(loadConfig(t, []string{srv.Addr}, shortPolicy))
	o.Processes, o.Goroutines = 2, 2
	rep := run(t, o)
	out := text(rep)
	want := "settings/maxmemory-policy on " + srv.Addr
	if rep.Passed || !slices.Equal(rep.Failed, []string{want}) {
		t.Fatalf("want only %s to fail, got %v:\n%s", want, rep.Failed, out)
	}
	if !strings.Contains(out, "FAIL maxmemory-policy") || !strings.Contains(out, "allkeys-lru") ||
		!strings.Contains(out, "fix: maxmemory-policy noeviction") || !strings.Contains(out, "FAIL: 1 of 7 checks failed") {
		t.Errorf("the report does not say what failed and how to fix it:\n%s", out)
	}
}

// TestSettingsNotCheckedSaidPlainly: where CONFIG is disabled (as on many
// managed services) verify cannot read the settings; it says which it did
// not check rather than passing silently.
func TestSettingsNotCheckedSaidPlainly(t *testing.T) {
	srv := valkeytest.Start(t, "--rename-command", "CONFIG", "")
	o := opts(loadConfig(t, []string{srv.Addr}, shortPolicy))
	o.Processes, o.Goroutines = 2, 2
	rep := run(t, o)
	out := text(rep)
	for _, want := range []string{"maxmemory-policy on " + srv.Addr, "persistence on " + srv.Addr} {
		if !slices.Contains(rep.NotChecked, want) {
			t.Errorf("NotChecked %v lacks %q", rep.NotChecked, want)
		}
	}
	if !strings.Contains(out, "\nNOT CHECKED (") || !strings.Contains(out, "NOT CHECKED maxmemory-policy") {
		t.Errorf("the report does not say plainly what it did not check:\n%s", out)
	}
}

// TestPersistenceCaveat: long windows on a server without AOF: the limits
// hold until a restart, and the verdict says so.
func TestPersistenceCaveat(t *testing.T) {
	srv := valkeytest.Start(t)
	o := opts(loadConfig(t, []string{srv.Addr}, `
policies:
  - {name: daily, algorithm: fixed_window, limit: 5, window: 24h}
`))
	o.Processes, o.Goroutines = 2, 2
	rep := run(t, o)
	out := text(rep)
	if !rep.Passed || len(rep.Caveats) != 1 || !strings.Contains(out, "\nBUT the limits hold only until a restart: persistence on "+srv.Addr) ||
		!strings.Contains(out, "daily (24h0m0s)") {
		t.Errorf("want a pass with the persistence caveat:\n%s", out)
	}
}
