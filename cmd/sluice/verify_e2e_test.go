package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/valkeytest"
)

// verifyYAML has a policy that fails open and one that fails closed; the
// addresses come from --valkey.
const verifyYAML = `
valkey:
  timeout: 50ms
policies:
  - {name: api, algorithm: gcra, burst: 20, rate: 50/s, on_failure: allow}
  - {name: login, algorithm: sliding_log, limit: 5, window: 15m, count_rejected: true, on_failure: deny}
`

func noStackTrace(t *testing.T, what, stderr string) {
	t.Helper()
	if strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "panic") {
		t.Errorf("%s: stack trace on stderr:\n%s", what, stderr)
	}
}

// TestE2EVerify: sluice verify passes on a healthy standalone server and
// Cluster, through the binary (its concurrency workers are the binary,
// started again), reports every check, and leaves no scratch key.
func TestE2EVerify(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfg, verifyYAML)
	srv := valkeytest.Start(t)
	cl := valkeytest.StartCluster(t, 3)
	for _, tc := range []struct {
		name  string
		addrs string
		keys  func() []string
	}{
		{"standalone", srv.Addr, func() []string {
			k, _ := valkeytest.Keys(context.Background(), srv.Client(t), "*")
			return k
		}},
		{"cluster", strings.Join(cl.Addrs, ","), func() []string {
			k, _ := valkeytest.Keys(context.Background(), cl.Client(t), "*")
			return k
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := sluiceCmd(t, "verify", "--config", cfg, "--valkey", tc.addrs, "--margin", "1500ms", "--blackhole-wait", "3s")
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			for _, want := range []string{"PASS concurrency  20 allowed of 40 attempted from 4 processes", "PASS boundaries", "PASS recovery",
				"PASS failure", "PASS ttl", "policy login: sliding_log", "\nPASS: 2 policies, 10 checks passed in "} {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout)
				}
			}
			if left := tc.keys(); len(left) > 0 {
				t.Errorf("keys left behind: %v", left)
			}
			if tc.name != "standalone" {
				return // the JSON is the same report
			}
			code, stdout, _ = sluiceCmd(t, "verify", "--config", cfg, "--valkey", tc.addrs, "--margin", "1500ms", "--blackhole-wait", "3s", "--json", "--policy", "api", "--processes", "2")
			var rep struct {
				Passed   bool
				Policies []struct {
					Policy string
					Checks []struct {
						Check   string
						Passed  bool
						Figures map[string]float64
					}
				}
				ElapsedMS float64 `json:"elapsed_ms"`
			}
			if err := json.Unmarshal([]byte(stdout), &rep); err != nil || code != 0 || !rep.Passed || len(rep.Policies) != 1 || rep.ElapsedMS <= 0 {
				t.Fatalf("--json: exit %d, %v:\n%s", code, err, stdout)
			}
			if c := rep.Policies[0].Checks[0]; c.Check != "concurrency" || c.Figures["allowed"] != 20 || c.Figures["processes"] != 2 {
				t.Errorf("--json concurrency: %+v", c)
			}
		})
	}
}

// TestE2EVerifyFails: against a deliberately broken setup sluice verify
// exits 1 and names the failed check: a proxy that splits each script call
// into a read and a write (non-atomic limiting), and a policy whose timeout
// is longer than the black-hole wait.
func TestE2EVerifyFails(t *testing.T) {
	t.Parallel()
	srv := valkeytest.Start(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	writeFile(t, cfg, verifyYAML)
	proxy := valkeytest.SplitProxy(t, srv.Addr, 2*time.Millisecond)
	code, stdout, stderr := sluiceCmd(t, "verify", "--config", cfg, "--valkey", proxy, "--margin", "1500ms", "--policy", "api")
	// The concurrency check must catch it; through a proxy that pauses
	// every call on a loaded machine, other checks may fail too.
	if code != 1 || !strings.Contains(stderr, "FAIL: api/concurrency") || !strings.Contains(stdout, "FAIL concurrency") ||
		!strings.Contains(stdout, "not enforced atomically") {
		t.Errorf("split proxy: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	noStackTrace(t, "split proxy", stderr)

	slow := filepath.Join(dir, "slow.yaml")
	writeFile(t, slow, "policies:\n  - {name: slow, algorithm: fixed_window, limit: 5, window: 1h, timeout: 3s}\n")
	code, stdout, stderr = sluiceCmd(t, "verify", "--config", slow, "--valkey", srv.Addr, "--processes", "2")
	if code != 1 || !strings.Contains(stderr, "FAIL: slow/failure\n") || !strings.Contains(stdout, "no decision within the black-hole wait of 1s") {
		t.Errorf("long timeout: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// TestE2EVerifyBadInput: a clear message and a non-zero exit, never a
// stack trace, and no key touched.
func TestE2EVerifyBadInput(t *testing.T) {
	srv := valkeytest.Start(t)
	c := srv.Client(t)
	if err := c.Do(context.Background(), c.B().Set().Key("taken:x:{y}").Value("1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfg, verifyYAML)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--valkey", srv.Addr, "--policy", "nope"}, 2, `unknown policy "nope"`},
		{[]string{"--valkey", valkeytest.ClosedAddr(t)}, 1, "cannot connect to valkey"},
		{[]string{"--valkey", srv.Addr, "--prefix", "taken"}, 1, `the scratch prefix "taken" already holds keys`},
		{[]string{}, 1, "names no Valkey"},
		{[]string{"--valkey", srv.Addr, "--processes", "0"}, 2, "--processes and --goroutines must be at least 1"},
		{[]string{"--valkey", srv.Addr, "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--valkey", srv.Addr, "--blackhole-wait", "-1s"}, 2, "--blackhole-wait, --margin and --lease-wait must be positive"},
		{[]string{"--valkey", srv.Addr, "--lease-wait", "0s"}, 2, "--blackhole-wait, --margin and --lease-wait must be positive"},
		{[]string{"--valkey", srv.Addr, "--prefix", "a{b"}, 1, `the prefix "a{b" must be non-empty, without braces or spaces`},
	} {
		code, _, stderr := sluiceCmd(t, append([]string{"verify", "--config", cfg}, tc.args...)...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr, tc.code, tc.want)
		}
		noStackTrace(t, strings.Join(tc.args, " "), stderr)
	}
	if v, _ := c.Do(context.Background(), c.B().Get().Key("taken:x:{y}").Build()).ToString(); v != "1" {
		t.Errorf("a key verify did not create was touched: %q", v)
	}
}
