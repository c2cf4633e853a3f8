package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/valkeytest"
)

// doctorYAML's timeout is far above any p99 of a loaded test machine.
const doctorYAML = `
valkey:
  timeout: 2s
policies:
  - {name: api, algorithm: gcra, burst: 20, rate: 5/s}
  - {name: daily, algorithm: fixed_window, limit: 10000, window: 24h}
`

// TestE2EDoctor: sluice doctor through the binary against servers
// configured wrongly on purpose (allkeys-lru, no AOF for a daily quota, a
// replica-less cluster) and a healthy one; bad input gets a message and a
// non-zero exit.
func TestE2EDoctor(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfg, doctorYAML)

	bad := valkeytest.Start(t, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
	code, stdout, stderr := sluiceCmd(t, "doctor", "--config", cfg, "--valkey", bad.Addr, "--samples", "20")
	if code != 1 {
		t.Errorf("allkeys-lru: exit %d, want 1\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{"ERROR", "maxmemory-policy", "maxmemory-policy allkeys-lru: when memory is full Valkey evicts limiter keys", "fix: maxmemory-policy noeviction",
		"WARNING", "a restart hands out fresh quotas for daily (24h0m0s)", "fix: appendonly yes", "1 errors, 1 warnings"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("allkeys-lru: stdout lacks %q:\n%s", want, stdout)
		}
	}

	cl := valkeytest.StartCluster(t, 3)
	code, stdout, _ = sluiceCmd(t, "doctor", "--config", cfg, "--valkey", strings.Join(cl.Addrs, ","), "--samples", "20", "--json")
	var rep struct {
		Mode     string
		Findings []struct{ Check, Severity, Message, Fix string }
		Worst    string
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || code != 1 || rep.Worst != "warning" || !strings.HasPrefix(rep.Mode, "cluster") {
		t.Fatalf("cluster --json: exit %d, %v, %+v\n%s", code, err, rep, stdout)
	}
	found := false
	for _, f := range rep.Findings {
		if f.Check == "replicas" && f.Severity == "warning" && strings.Contains(f.Message, "3 of 3 primaries have no replica") && strings.Contains(f.Fix, "--cluster-slave") {
			found = true
		}
	}
	if !found {
		t.Errorf("no replicas warning: %+v", rep.Findings)
	}

	good := valkeytest.Start(t, "--appendonly", "yes")
	if code, stdout, stderr := sluiceCmd(t, "doctor", "--config", cfg, "--valkey", good.Addr, "--samples", "20"); code != 0 || !strings.Contains(stdout, "0 errors, 0 warnings") {
		t.Errorf("healthy: exit %d\n%s%s", code, stdout, stderr)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--valkey", valkeytest.ClosedAddr(t)}, 1, "cannot connect to valkey"},
		{[]string{}, 1, "names no Valkey"},
		{[]string{"--valkey", good.Addr, "--samples", "0"}, 2, "--samples must be at least 1"},
	} {
		code, _, stderr := sluiceCmd(t, append([]string{"doctor", "--config", cfg}, tc.args...)...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr, tc.code, tc.want)
		}
		noStackTrace(t, strings.Join(tc.args, " "), stderr)
	}
}
