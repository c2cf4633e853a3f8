package verify_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/verify"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
)

// TestMain serves as a concurrency worker when Run starts this test binary
// as one, as sluice does.
func TestMain(m *testing.M) {
	if os.Getenv(verify.WorkerEnv) == "1" {
		if err := verify.ServeWorker(context.Background(), os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	valkeytest.Main(m)
}

// allAlgorithms has one policy per algorithm, with short periods so that
// the real-time part of recovery waits little.
const allAlgorithms = `
policies:
  - {name: fw, algorithm: fixed_window, limit: 10, window: 300ms}
  - {name: sl, algorithm: sliding_log, limit: 5, window: 300ms, count_rejected: true, on_failure: deny}
  - {name: sw, algorithm: sliding_window, limit: 25, window: 1s}
  - {name: tb, algorithm: token_bucket, burst: 8, rate: 40/s}
  - {name: gcra, algorithm: gcra, burst: 12, rate: 50/s, on_failure: deny}
`

func loadConfig(t *testing.T, addrs []string, yaml string) *config.Config {
	t.Helper()
	var b strings.Builder
	b.WriteString("valkey:\n  timeout: 50ms\n  addresses:\n")
	for _, a := range addrs {
		fmt.Fprintf(&b, "    - %s\n", a)
	}
	cfg, err := config.Parse("test.yaml", []byte(b.String()+yaml))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// opts are Options for a loaded test machine (other tests, the race
// detector): the failure path's bounds are about "not after seconds", not
// about speed. (Under load a decision against a hung server has been seen
// to take about a second, when valkey-go closes a timed-out connection;
// valkeystore's deadline layer documents it.)
func opts(cfg *config.Config) verify.Options {
	return verify.Options{Config: cfg, Margin: 1500 * time.Millisecond, BlackholeWait: 3 * time.Second, Processes: 4, Goroutines: 8}
}

func run(t *testing.T, o verify.Options) *verify.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := verify.Run(ctx, o)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return rep
}

func text(rep *verify.Report) string {
	var b bytes.Buffer
	rep.WriteText(&b)
	return b.String()
}

// passes runs every check of every algorithm and expects all to pass, the
// figures to be those promised, and no scratch key to be left.
func passes(t *testing.T, addrs []string, c valkey.Client) {
	cfg := loadConfig(t, addrs, allAlgorithms)
	rep := run(t, opts(cfg))
	out := text(rep)
	t.Logf("%s", out)
	for _, p := range rep.Policies {
		for _, c := range p.Checks {
			t.Logf("%s/%s: %v", p.Name, c.Name, c.Elapsed)
		}
	}
	if !rep.Passed || !strings.Contains(out, "\nPASS: 5 policies, 25 checks passed") {
		t.Fatalf("want a pass:\n%s", out)
	}
	for _, p := range rep.Policies {
		rule := cfg.Policy(p.Name)
		for _, c := range p.Checks {
			f := c.Figures
			switch c.Name {
			case "concurrency":
				if f["allowed"] != float64(rule.Limit) || f["attempted"] != float64(2*rule.Limit) {
					t.Errorf("%s: %v", p.Name, f)
				}
			case "recovery":
				if f["advertised_ms"] <= 0 || f["advertised_ms"] != f["observed_ms"] || f["real_wait_ms"] <= 0 {
					t.Errorf("%s: %v", p.Name, f)
				}
			case "ttl":
				if f["longest_ms"] > f["bound_ms"] {
					t.Errorf("%s: %v", p.Name, f)
				}
			}
		}
	}
	// (The policies' windows are short: their keys may all have expired
	// before the cleanup.)
	if rep.CleanupError != "" {
		t.Errorf("cleanup: %d keys deleted, %q", rep.KeysDeleted, rep.CleanupError)
	}
	left, err := valkeytest.Keys(context.Background(), c, rep.Prefix+":*")
	if err != nil || len(left) > 0 {
		t.Errorf("keys left under %s: %v, %v", rep.Prefix, left, err)
	}
}

func TestStandalone(t *testing.T) {
	srv := valkeytest.Start(t)
	passes(t, []string{srv.Addr}, srv.Client(t))
}

func TestCluster(t *testing.T) {
	cl := valkeytest.StartCluster(t, 3)
	passes(t, cl.Addrs, cl.Client(t))
}

// TestCatchesNonAtomic: behind a proxy that turns each script call into a
// read and a later write, twice the limit from several processes gets more
// than the limit through, and verify fails, naming the check.
func TestCatchesNonAtomic(t *testing.T) {
	srv := valkeytest.Start(t)
	proxy := valkeytest.SplitProxy(t, srv.Addr, 2*time.Millisecond)
	cfg := loadConfig(t, []string{proxy}, `
policies:
  - {name: api, algorithm: gcra, burst: 20, rate: 1/h}
`)
	o := opts(cfg)
	o.Goroutines = 4
	rep := run(t, o)
	out := text(rep)
	t.Logf("\n%s", out)
	if rep.Passed || len(rep.Failed) == 0 || rep.Failed[0] != "api/concurrency" {
		t.Fatalf("want concurrency to fail:\n%s", out)
	}
	if !strings.Contains(out, "FAIL concurrency") || !strings.Contains(out, "not enforced atomically") ||
		!strings.Contains(out, "FAIL: ") || !strings.Contains(out, "api/concurrency") {
		t.Errorf("the report does not say which check failed and why:\n%s", out)
	}
	if allowed := rep.Policies[0].Checks[0].Figures["allowed"]; allowed <= 20 {
		t.Errorf("%v allowed through the split proxy, want more than 20", allowed)
	}
}

// TestCatchesLongTimeout: a policy whose timeout is longer than the
// black-hole wait holds requests while Valkey hangs; verify fails the
// failure check and says so.
func TestCatchesLongTimeout(t *testing.T) {
	srv := valkeytest.Start(t)
	cfg := loadConfig(t, []string{srv.Addr}, `
policies:
  - {name: slow, algorithm: fixed_window, limit: 5, window: 1h, timeout: 3s}
`)
	o := opts(cfg)
	o.Processes, o.Goroutines = 2, 2
	o.BlackholeWait = time.Second
	rep := run(t, o)
	out := text(rep)
	if rep.Passed || strings.Join(rep.Failed, ",") != "slow/failure" {
		t.Fatalf("want only the failure check to fail:\n%s", out)
	}
	if !strings.Contains(out, "longer than the black-hole wait 1s") || !strings.Contains(out, "no decision within the black-hole wait of 1s") {
		t.Errorf("the report does not say why:\n%s", out)
	}
}

// TestRefusesUsedPrefix: a prefix that holds a key verify did not create
// is refused, and the key is left alone.
func TestRefusesUsedPrefix(t *testing.T) {
	srv := valkeytest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	if err := c.Do(ctx, c.B().Set().Key("mine:api:{x}").Value("precious").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	o := opts(loadConfig(t, []string{srv.Addr}, allAlgorithms))
	o.Prefix = "mine"
	_, err := verify.Run(ctx, o)
	var used *verify.PrefixInUseError
	if !errors.As(err, &used) || used.Example != "mine:api:{x}" || !strings.Contains(err.Error(), "did not create") {
		t.Fatalf("err = %v, want a PrefixInUseError", err)
	}
	if v, _ := c.Do(ctx, c.B().Get().Key("mine:api:{x}").Build()).ToString(); v != "precious" {
		t.Errorf("the key was touched: %q", v)
	}
}

func TestBadInput(t *testing.T) {
	srv := valkeytest.Start(t)
	ctx := context.Background()
	o := opts(loadConfig(t, []string{srv.Addr}, allAlgorithms))
	o.Policies = []string{"fw", "nope"}
	if _, err := verify.Run(ctx, o); !errors.Is(err, verify.ErrUnknownPolicy) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown policy: %v", err)
	}
	o = opts(loadConfig(t, []string{valkeytest.ClosedAddr(t)}, allAlgorithms))
	if _, err := verify.Run(ctx, o); err == nil || !strings.Contains(err.Error(), "cannot connect") {
		t.Errorf("unreachable: %v", err)
	}
	cfg, _ := config.Parse("x.yaml", []byte(allAlgorithms))
	if _, err := verify.Run(ctx, verify.Options{Config: cfg}); err == nil || !strings.Contains(err.Error(), "no Valkey configured") {
		t.Errorf("no valkey: %v", err)
	}
}

// TestSentinel: verify finds the master through Valkey Sentinel, as sluice
// serve does.
func TestSentinel(t *testing.T) {
	primary := valkeytest.Start(t)
	ss := valkeytest.StartSentinels(t, primary, 1, 0)
	yaml := fmt.Sprintf(`
valkey:
  timeout: 50ms
  sentinel: {master_set: %s, addresses: [%s]}
policies:
  - {name: api, algorithm: gcra, burst: 10, rate: 50/s}
  - {name: login, algorithm: sliding_log, limit: 5, window: 15m, on_failure: deny}
`, valkeytest.SentinelMaster, strings.Join(ss.Addrs, ", "))
	cfg, err := config.Parse("sentinel.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	rep := run(t, opts(cfg))
	out := text(rep)
	if !rep.Passed || !strings.Contains(out, "valkey master mymaster via Sentinels "+ss.Addrs[0]+" (sentinel, master at "+primary.Addr+")") {
		t.Fatalf("want a pass through the Sentinel:\n%s", out)
	}
	if left, _ := valkeytest.Keys(context.Background(), primary.Client(t), rep.Prefix+":*"); len(left) > 0 {
		t.Errorf("keys left: %v", left)
	}
}

// inFlightPolicies are two in_flight policies: one whose Lease the crash
// check waits out, one whose hour-long Lease it shortens to the lease
// wait.
const inFlightPolicies = `
policies:
  - {name: exports, algorithm: in_flight, limit: 5, lease: 800ms}
  - {name: builds, algorithm: in_flight, limit: 2, lease: 1h, on_failure: deny}
`

// TestInFlight: verify checks an in_flight policy for real on a real
// Valkey: holders in several processes never hold more than Limit at once
// and keep the slots busy; a holder of every slot killed with SIGKILL is
// refused until its leases end and its slots come back within the margin;
// the fail mode and the TTLs hold.
func TestInFlight(t *testing.T) {
	srv := valkeytest.Shared(t)
	o := opts(loadConfig(t, []string{srv.Addr}, inFlightPolicies))
	o.LeaseWait = time.Second
	rep := run(t, o)
	out := text(rep)
	t.Logf("\n%s", out)
	if !rep.Passed || !strings.Contains(out, "\nPASS: 2 policies, 8 checks passed") {
		t.Fatalf("want a pass:\n%s", out)
	}
	for _, p := range rep.Policies {
		limit := map[string]float64{"exports": 5, "builds": 2}[p.Name]
		var names []string
		for _, c := range p.Checks {
			names = append(names, c.Name)
			f := c.Figures
			switch c.Name {
			case "concurrency":
				if f["max_held"] > limit || f["max_held"] < 1 || f["mean_held"] < limit/2 || f["holders"] < 2*limit || f["leases"] < 20 {
					t.Errorf("%s/concurrency: %v", p.Name, f)
				}
			case "crash":
				want := map[string]float64{"exports": 800, "builds": 1000}[p.Name]
				if f["lease_ms"] != want || f["refused"] < 1 || f["admitted_after_lease_ms"] > f["margin_ms"] {
					t.Errorf("%s/crash: %v", p.Name, f)
				}
				t.Logf("%s: admitted %.1fms after the killed holder's last lease ended", p.Name, f["admitted_after_lease_ms"])
			}
		}
		if strings.Join(names, ",") != "concurrency,crash,failure,ttl" {
			t.Errorf("%s: checks %v", p.Name, names)
		}
	}
	if !strings.Contains(out, "lease 1s (the policy's 1h0m0s shortened to the lease wait)") {
		t.Errorf("the report does not say the crash check shortened the lease:\n%s", out)
	}
}

// TestInFlightCluster: the in_flight checks pass on a 3-primary Cluster
// with replicas.
func TestInFlightCluster(t *testing.T) {
	cl := valkeytest.SharedCluster(t)
	o := opts(loadConfig(t, cl.Addrs, "policies:\n  - {name: exports, algorithm: in_flight, limit: 5, lease: 800ms}\n"))
	rep := run(t, o)
	out := text(rep)
	t.Logf("\n%s", out)
	if !rep.Passed || !strings.Contains(out, "\nPASS: 1 policies, 4 checks passed") {
		t.Fatalf("want a pass:\n%s", out)
	}
	crash := rep.Policies[0].Checks[1].Figures
	t.Logf("admitted %.1fms after the killed holder's last lease ended", crash["admitted_after_lease_ms"])
}

// TestCatchesInFlightNonAtomic: behind the proxy that splits each script
// call into a read and a later write, holders in several processes hold
// more leases at once than the limit (and some releases find their lease
// gone): verify fails the in_flight concurrency check and says why.
func TestCatchesInFlightNonAtomic(t *testing.T) {
	srv := valkeytest.Shared(t)
	proxy := valkeytest.SplitProxy(t, srv.Addr, 2*time.Millisecond)
	o := opts(loadConfig(t, []string{proxy}, "policies:\n  - {name: exports, algorithm: in_flight, limit: 3, lease: 1s}\n"))
	o.Goroutines = 4
	rep := run(t, o)
	out := text(rep)
	t.Logf("\n%s", out)
	if rep.Passed || len(rep.Failed) == 0 || rep.Failed[0] != "exports/concurrency" {
		t.Fatalf("want the concurrency check to fail:\n%s", out)
	}
	if !strings.Contains(out, "more than the limit 3: the limit is not enforced atomically") {
		t.Errorf("the report does not say why:\n%s", out)
	}
	if f := rep.Policies[0].Checks[0].Figures; f["max_held"] <= 3 {
		t.Errorf("figures %v, want more than 3 held at once", f)
	}
}
