package main

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/benchmarks"
	"github.com/sluicehq/sluice/driver"
)

// TestClientfloorSmoke runs every kind of target briefly against a
// valkey-server of its own: a row per target and round, then medians; the
// floors' counts agree with the harness's and the server's (run fails
// otherwise); the valkey-go floor sends between 1 and -max-keys
// decisions per EVALSHA, the runtime floor none; the reported rate is the
// decisions over the run's time.
func TestClientfloorSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts valkey-server")
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"-conc", "8", "-keys", "300", "-duration", "300ms", "-rounds", "2",
		"-max-keys", "4", "-targets", "floor-runtime,floor-raw/gcra,floor-valkey-go/gcra,floor-valkey-go/token_bucket,sluice/gcra,valkeylimiter"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", code, &errb)
	}
	rows := map[string]int{}
	medians := map[string]bool{}
	inMedians := false
	for _, line := range strings.Split(out.String(), "\n") {
		inMedians = inMedians || strings.HasPrefix(line, "Medians")
		f := strings.Split(line, "|")
		if len(f) == 14 && (f[1] == " 1 " || f[1] == " 2 ") {
			label := strings.TrimSpace(f[2])
			rows[label]++
			rate := number(t, f[3])
			allowed, denied, errs := number(t, f[10]), number(t, f[11]), number(t, f[12])
			if allowed == 0 || denied != 0 || errs != 0 {
				t.Errorf("%s: allowed %v, denied %v, errors %v; want all allowed", label, allowed, denied, errs)
			}
			if secs := allowed / rate; secs < 0.3 || secs > 3 {
				t.Errorf("%s: %v decisions at %v/s is %.2fs, not a run of 300ms", label, allowed, rate, secs)
			}
			if cpu := number(t, f[4]); cpu <= 0 {
				t.Errorf("%s: client CPU %v µs per decision", label, cpu)
			}
			perCall := strings.TrimSpace(f[7])
			switch {
			case label == runtimeFloor && perCall != "-":
				t.Errorf("runtime floor: %s decisions per EVALSHA, want none", perCall)
			case strings.HasPrefix(label, valkeyFloor), strings.HasPrefix(label, rawFloor):
				if n := number(t, perCall); n < 1 || n > 4 {
					t.Errorf("%s: %v decisions per EVALSHA, want 1 to 4", label, n)
				}
			}
		}
		if inMedians && len(f) == 8 {
			medians[strings.TrimSpace(f[1])] = true
		}
	}
	for _, label := range []string{"floor-runtime", "floor-raw/gcra", "floor-valkey-go/gcra", "floor-valkey-go/token_bucket", "sluice/gcra", "valkeylimiter/fixed_window"} {
		if rows[label] != 2 {
			t.Errorf("%s: %d rows, want 2 (one per round)", label, rows[label])
		}
		if !medians[label] {
			t.Errorf("%s: no medians row", label)
		}
	}
	for _, want := range []string{"Load average before: ", "Load average after: ", "8 goroutines, 300 keys"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("report:\n%s", &out)
	}
}

func number(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(strings.ReplaceAll(strings.TrimSpace(s), ",", ""), 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return v
}

// startServer starts a valkey-server for t, stopped when t ends; -short
// skips the tests that need one.
func startServer(t *testing.T) *benchmarks.Server {
	t.Helper()
	if testing.Short() {
		t.Skip("starts valkey-server")
	}
	srv, err := benchmarks.StartServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// TestValkeyFloorDecides: the valkey-go and raw floors run Sluice's real script:
// a burst of 3 allows 3 decisions of a key and refuses the rest, alone
// and among concurrent callers whose decisions share calls, and it
// counts every decision and call.
func TestValkeyFloorDecides(t *testing.T) {
	srv := startServer(t)
	for _, tc := range []struct {
		open func(string, sluice.Rule, int, int) (*floor, error)
		alg  driver.Algorithm
	}{{openValkeyFloor, driver.AlgorithmGCRA}, {openValkeyFloor, driver.AlgorithmTokenBucket}, {openRawFloor, driver.AlgorithmGCRA}} {
		alg := tc.alg
		policy, err := sluice.PolicyOf(alg, driver.Params{Limit: 3, Rate: 1, Per: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		rule, err := policy.Rule()
		if err != nil {
			t.Fatal(err)
		}
		// Each floor's keys have a prefix of its own, and the rule's
		// algorithm in them: no key is decided twice across the cases.
		f, err := tc.open(srv.Addr, rule, 4, 2)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for i, want := range []benchmarks.Outcome{benchmarks.Allowed, benchmarks.Allowed, benchmarks.Allowed, benchmarks.Denied, benchmarks.Denied} {
			if got, err := f.Allow(ctx, "alone"); err != nil || got != want {
				t.Fatalf("%v: decision %d: %v, %v; want %v", alg, i, got, err, want)
			}
		}
		const callers, each = 40, 5
		allowed := make([]int, callers)
		var wg sync.WaitGroup
		for c := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					out, err := f.Allow(ctx, "k"+strconv.Itoa(c))
					if err != nil {
						t.Error(err)
						return
					}
					if out == benchmarks.Allowed {
						allowed[c]++
					}
				}
			}()
		}
		wg.Wait()
		for c, n := range allowed {
			if n != 3 {
				t.Errorf("%v: key k%d: %d of %d allowed, want 3", alg, c, n, each)
			}
		}
		calls, decisions := f.counts()
		if decisions != 5+callers*each || calls < decisions/4 || calls > decisions {
			t.Errorf("%v: %d calls, %d decisions; want %d decisions in calls of 1 to 4", alg, calls, decisions, 5+callers*each)
		}
		f.Close()
	}
}

// TestRuntimeFloorAnswersAll: the runtime floor allows every decision
// and counts them, in batches of at most -max-keys.
func TestRuntimeFloorAnswersAll(t *testing.T) {
	rule, err := benchmarks.SluiceRule("gcra", benchmarks.Spread)
	if err != nil {
		t.Fatal(err)
	}
	f := openRuntimeFloor(rule, 16, 4)
	defer f.Close()
	var wg sync.WaitGroup
	for c := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				if out, err := f.Allow(context.Background(), strconv.Itoa(c*1000+i)); err != nil || out != benchmarks.Allowed {
					t.Errorf("%v, %v", out, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	calls, decisions := f.counts()
	if decisions != 6400 || calls < 6400/16 || calls > 6400 {
		t.Errorf("%d calls, %d decisions; want 6400 decisions in calls of 1 to 16", calls, decisions)
	}
}

func TestClientfloorFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-conc", "0"}, {"-keys", "0"}, {"-max-keys", "0"}, {"-inflight", "0"}, {"-duration", "0s"}, {"-rounds", "0"},
		{"-targets", "nope"}, {"-targets", "floor-valkey-go/nope"}, {"-targets", "floor-raw/nope"}, {"-targets", ""}, {"extra"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("run(%q) = %d, want 2", args, code)
		}
	}
}

// TestTimedChecksFloorCounts: a run fails when a floor's count of
// decisions disagrees with the harness's, or its count of calls with the
// server's EVALSHA count.
func TestTimedChecksFloorCounts(t *testing.T) {
	srv := startServer(t)
	admin, err := benchmarks.NewAdmin(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	rule, err := benchmarks.SluiceRule("gcra", benchmarks.Spread)
	if err != nil {
		t.Fatal(err)
	}
	o := &options{conc: 4, duration: 50 * time.Millisecond}
	keys := benchmarks.MakeKeys(10)
	ctx := context.Background()

	good := openRuntimeFloor(rule, 16, 2)
	defer good.Close()
	if _, err := timed(ctx, o, admin, good, keys); err != nil {
		t.Fatalf("a floor that counts right: %v", err)
	}

	var miscount *floor
	miscount = newFloor("floor-runtime", "bench", rule, 16, []decideFunc{func(batch []*request) {
		for _, r := range batch {
			r.allowed = true
		}
		miscount.decisions.Add(1) // one decision too many per batch
	}}, nil)
	defer miscount.Close()
	if _, err := timed(ctx, o, admin, miscount, keys); err == nil || !strings.Contains(err.Error(), "the harness counted") {
		t.Errorf("a floor that miscounts decisions: %v, want an error", err)
	}

	silent := openRuntimeFloor(rule, 16, 2)
	silent.sends = true // claims an EVALSHA per batch, sends none
	defer silent.Close()
	if _, err := timed(ctx, o, admin, silent, keys); err == nil || !strings.Contains(err.Error(), "EVALSHA") {
		t.Errorf("a floor whose calls the server never saw: %v, want an error", err)
	}
}
