package doctor_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/doctor"
	"github.com/sluicehq/sluice/valkeytest"
)

func TestMain(m *testing.M) { valkeytest.Main(m) }

const policies = `
policies:
  - {name: api, algorithm: gcra, burst: 20, rate: 5/s}
  - {name: daily, algorithm: fixed_window, limit: 10000, window: 24h}
`

func cfg(t *testing.T, addrs []string, extra, pols string) *config.Config {
	t.Helper()
	var b strings.Builder
	b.WriteString("valkey:\n" + extra + "  addresses:\n")
	for _, a := range addrs {
		fmt.Fprintf(&b, "    - %s\n", a)
	}
	c, err := config.Parse("test.yaml", []byte(b.String()+pols))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func run(t *testing.T, o doctor.Options) (*doctor.Report, string) {
	t.Helper()
	o.Samples = 50
	rep, err := doctor.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	rep.WriteText(&b)
	t.Logf("\n%s", &b)
	return rep, b.String()
}

// find returns the findings of check.
func find(rep *doctor.Report, check string) []*doctor.Finding {
	var out []*doctor.Finding
	for _, f := range rep.Findings {
		if f.Check == check {
			out = append(out, f)
		}
	}
	return out
}

func want(t *testing.T, rep *doctor.Report, check string, sev doctor.Severity, msg, fix string) {
	t.Helper()
	fs := find(rep, check)
	if len(fs) == 0 {
		t.Errorf("no %s finding", check)
		return
	}
	for _, f := range fs {
		if f.Severity != sev || !strings.Contains(f.Message, msg) || !strings.Contains(f.Fix, fix) {
			t.Errorf("%s: %+v; want %v with %q, fix %q", check, f, sev, msg, fix)
		}
	}
}

// TestMisconfigured: a server that evicts (allkeys-lru) and has no AOF
// while a policy counts per day.
func TestMisconfigured(t *testing.T) {
	srv := valkeytest.Start(t, "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru")
	rep, out := run(t, doctor.Options{Config: cfg(t, []string{srv.Addr}, "", policies)})
	want(t, rep, "maxmemory-policy", doctor.Error, "maxmemory-policy allkeys-lru: when memory is full Valkey evicts limiter keys", "maxmemory-policy noeviction")
	want(t, rep, "persistence", doctor.Warning, "a restart hands out fresh quotas for daily (24h0m0s)", "appendonly yes")
	want(t, rep, "version", doctor.OK, "valkey 8.", "")
	want(t, rep, "scripts", doctor.OK, "all five algorithms", "")
	want(t, rep, "acl", doctor.OK, `user "default" may run`, "")
	if rep.Worst != doctor.Error || !strings.Contains(out, "ERROR") || !strings.Contains(out, "fix: maxmemory-policy noeviction") {
		t.Errorf("worst %v:\n%s", rep.Worst, out)
	}
	// volatile-* evicts Sluice's keys too (they all have a TTL); without
	// maxmemory it is a warning.
	srv2 := valkeytest.Start(t, "--maxmemory-policy", "volatile-ttl")
	rep, _ = run(t, doctor.Options{Config: cfg(t, []string{srv2.Addr}, "", policies)})
	want(t, rep, "maxmemory-policy", doctor.Warning, "volatile-ttl would evict limiter keys", "noeviction")
	// The probe keys are gone.
	if keys, _ := valkeytest.Keys(context.Background(), srv.Client(t), "*"); len(keys) > 0 {
		t.Errorf("doctor left keys: %v", keys)
	}
}

// TestPersistenceInFlight: without AOF, a restart forgets the leases an
// in_flight policy holds, which a long lease makes worth a warning that
// says so (not "fresh quotas", which is what it says of windows); a short
// lease costs at most one lease.
func TestPersistenceInFlight(t *testing.T) {
	srv := valkeytest.Start(t)
	for _, c := range []struct {
		pols, msg string
		sev       doctor.Severity
	}{
		{"policies:\n  - {name: jobs, algorithm: in_flight, limit: 5, lease: 2h}\n",
			"a restart forgets the leases held for jobs (lease 2h0m0s): up to twice the limit may then be held at once", doctor.Warning},
		{policies + "  - {name: jobs, algorithm: in_flight, limit: 5, lease: 2h}\n",
			"a restart hands out fresh quotas for daily (24h0m0s); it forgets the leases held for jobs (lease 2h0m0s)", doctor.Warning},
		{"policies:\n  - {name: jobs, algorithm: in_flight, limit: 5, lease: 30s}\n",
			"no policy has a window or lease of 1h0m0s or more, so that costs at most one window (for in_flight, one lease)", doctor.Info},
	} {
		rep, _ := run(t, doctor.Options{Config: cfg(t, []string{srv.Addr}, "", c.pols)})
		want(t, rep, "persistence", c.sev, c.msg, "appendonly yes")
	}
}

func TestHealthy(t *testing.T) {
	srv := valkeytest.Start(t, "--maxmemory-policy", "noeviction", "--appendonly", "yes")
	// Timeouts far above any p99 of a loaded test machine.
	rep, out := run(t, doctor.Options{Config: cfg(t, []string{srv.Addr}, "  timeout: 2s\n", policies)})
	if rep.Worst > doctor.Info {
		t.Errorf("worst %v on a healthy server:\n%s", rep.Worst, out)
	}
	want(t, rep, "persistence", doctor.OK, "appendonly yes", "")
	want(t, rep, "clock", doctor.OK, "skew", "")
	want(t, rep, "latency", doctor.OK, "p99", "")
}

// TestClusterWithoutReplicas: every primary of a replica-less cluster is
// named.
func TestClusterWithoutReplicas(t *testing.T) {
	cl := valkeytest.StartCluster(t, 3)
	rep, _ := run(t, doctor.Options{Config: cfg(t, cl.Addrs, "", policies)})
	want(t, rep, "replicas", doctor.Warning, "3 of 3 primaries have no replica", "--cluster-slave")
	want(t, rep, "cluster", doctor.OK, "16384 slots covered by 3 primaries", "")
	want(t, rep, "scripts", doctor.OK, "all five", "")
	if n := len(find(rep, "maxmemory-policy")); n != 3 {
		t.Errorf("%d maxmemory-policy findings, want one per primary", n)
	}
}

// TestConfigDisabled: a user that may not run CONFIG (as on managed
// services) gets "could not check", not a failure.
func TestConfigDisabled(t *testing.T) {
	srv := valkeytest.Start(t)
	c := srv.Client(t)
	if err := c.Do(context.Background(), c.B().Arbitrary("ACL", "SETUSER", "app", "on", ">app-password-123", "~*", "&*", "+@all", "-config", "-acl").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	env := func(k string) (string, bool) { return "app-password-123", k == "APP_PW" }
	rep, out := run(t, doctor.Options{Config: cfg(t, []string{srv.Addr}, "  username: app\n  password_env: APP_PW\n  timeout: 2s\n", policies), Env: env})
	for _, check := range []string{"maxmemory-policy", "persistence", "min-replicas-to-write", "acl"} {
		want(t, rep, check, doctor.Unknown, "could not check", "")
	}
	want(t, rep, "scripts", doctor.OK, "all five", "")
	if rep.Worst != doctor.Unknown || !strings.Contains(out, "COULD NOT CHECK") {
		t.Errorf("worst %v:\n%s", rep.Worst, out)
	}
}

// TestTimeoutBelowP99: behind a 5ms delay, a 2ms timeout is below the p99
// and a 7ms one less than twice it.
func TestTimeoutBelowP99(t *testing.T) {
	srv := valkeytest.Start(t)
	far := valkeytest.DelayProxy(t, srv.Addr, 5*time.Millisecond)
	rep, _ := run(t, doctor.Options{Config: cfg(t, []string{far}, "", `
policies:
  - {name: tight, algorithm: gcra, burst: 20, rate: 5/s, timeout: 2ms}
  - {name: roomy, algorithm: gcra, burst: 20, rate: 5/s, timeout: 10s}
`)})
	fs := find(rep, "latency")
	if len(fs) != 1 || fs[0].Severity != doctor.Error || !strings.Contains(fs[0].Message, "policy tight: timeout 2ms is below the measured p99") ||
		!strings.Contains(fs[0].Fix, "on policy tight") {
		t.Errorf("latency findings: %+v", fs)
	}
}

// TestSentinel: doctor reaches the master through Valkey Sentinel.
func TestSentinel(t *testing.T) {
	primary := valkeytest.Start(t)
	ss := valkeytest.StartSentinels(t, primary, 1, 0)
	c, err := config.Parse("sentinel.yaml", []byte(fmt.Sprintf(`
valkey:
  timeout: 2s
  sentinel: {master_set: %s, addresses: [%s]}
`, valkeytest.SentinelMaster, ss.Addrs[0])+policies))
	if err != nil {
		t.Fatal(err)
	}
	rep, out := run(t, doctor.Options{Config: c})
	if rep.Mode != "sentinel, master at "+primary.Addr || !strings.Contains(out, "valkey master mymaster via Sentinels "+ss.Addrs[0]) {
		t.Errorf("mode %q:\n%s", rep.Mode, out)
	}
	want(t, rep, "scripts", doctor.OK, "all five", "")
	want(t, rep, "version", doctor.OK, "valkey", "")
}
