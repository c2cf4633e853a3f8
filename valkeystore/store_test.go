package valkeystore_test

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
)

func TestMain(m *testing.M) { valkeytest.Main(m) }

func newStore(t testing.TB, c valkey.Client, opts ...valkeystore.Option) *valkeystore.Store {
	t.Helper()
	s, err := valkeystore.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func harness(t testing.TB, c valkey.Client) sluicetest.Harness {
	return sluicetest.Harness{
		Store: newStore(t, c),
		TTLs: func(t testing.TB, prefix string) map[string]time.Duration {
			m, err := valkeytest.TTLs(context.Background(), c, prefix+"*")
			if err != nil {
				t.Fatal(err)
			}
			// A key that expired between the scan and its PTTL (a loaded
			// machine's slow check of a 300ms window) kept its promise.
			maps.DeleteFunc(m, func(_ string, ttl time.Duration) bool { return ttl == valkeytest.Gone })
			return m
		},
	}
}

func TestConformanceStandalone(t *testing.T) {
	sluicetest.Run(t, harness(t, valkeytest.Shared(t).Client(t)))
}

func TestConformanceCluster(t *testing.T) {
	sluicetest.Run(t, harness(t, valkeytest.SharedCluster(t).Client(t)))
}

// TestScriptFlush checks that scripts lost to SCRIPT FLUSH are reloaded
// without an error reaching the caller.
func TestScriptFlush(t *testing.T) {
	c := valkeytest.Shared(t).Client(t)
	h := harness(t, c)
	ctx := context.Background()
	for _, p := range sluicetest.Policies() {
		l := h.NewLimiter(t, p)
		for i := range 3 {
			if err := c.Do(ctx, c.B().ScriptFlush().Build()).Error(); err != nil {
				t.Fatal(err)
			}
			res, err := l.Allow(ctx, "k")
			if err != nil || res.Degraded || !res.Allowed {
				t.Fatalf("%v, call %d after SCRIPT FLUSH: %+v, %v", l.Rule(), i, res, err)
			}
		}
	}
}

// TestBatch decides many keys of every algorithm in one Do: the store
// splits them by algorithm and slot, and each Op gets its own Result.
func TestBatch(t *testing.T) {
	for name, c := range map[string]valkey.Client{
		"standalone": valkeytest.Shared(t).Client(t),
		"cluster":    valkeytest.SharedCluster(t).Client(t),
	} {
		t.Run(name, func(t *testing.T) {
			s := newStore(t, c)
			prefix := sluicetest.Prefix(t)
			var ops []driver.Op
			for pi, p := range sluicetest.Policies() {
				r, _ := p.Rule()
				for k := range 40 {
					key := driver.Key(prefix, fmt.Sprintf("p%d-%d", pi, k%7), r, "id"+strconv.Itoa(k%13))
					ops = append(ops, driver.Op{Key: key, Rule: r, Cost: 1, Now: sluicetest.Epoch})
				}
			}
			if err := s.Do(context.Background(), ops); err != nil {
				t.Fatal(err)
			}
			// Replay one by one on a memory twin: same Results.
			seen := map[string]int64{}
			for i, op := range ops {
				if op.Err != nil {
					t.Fatalf("op %d: %v", i, op.Err)
				}
				seen[op.Key]++
				want := op.Rule.Limit - seen[op.Key]
				if op.Result.Remaining != max(0, want) || op.Result.Allowed != (want >= 0) {
					t.Fatalf("op %d (%v, use %d of %s): %+v", i, op.Rule, seen[op.Key], op.Key, op.Result)
				}
			}
		})
	}
}

// TestMultiProcess sends twice the limit at one key from four OS processes
// with many goroutines each, for every algorithm, on a standalone server
// and on a cluster: exactly the limit is allowed.
func TestMultiProcess(t *testing.T) {
	const procs, perProc = 4, 50 // 200 requests = twice the limit
	srv := valkeytest.Shared(t)
	cl := valkeytest.SharedCluster(t)
	prefix := sluicetest.Prefix(t)
	start := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	totals := map[string]int{}
	var mu sync.Mutex
	for i := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChildProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(),
			"SLUICE_CHILD=1",
			"SLUICE_ADDR="+srv.Addr,
			"SLUICE_CLUSTER="+strings.Join(cl.Addrs, ","),
			"SLUICE_PREFIX="+prefix,
			"SLUICE_START="+strconv.FormatInt(start.UnixNano(), 10),
			"SLUICE_N="+strconv.Itoa(perProc),
		)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var name string
				var n int
				if _, err := fmt.Sscanf(sc.Text(), "ALLOWED %s %d", &name, &n); err == nil {
					mu.Lock()
					totals[name] += n
					mu.Unlock()
				}
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("child %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if len(totals) != 2*len(childPolicies) {
		t.Fatalf("got results for %d cases, want %d: %v", len(totals), 2*len(childPolicies), totals)
	}
	for name, n := range totals {
		if n != childLimit {
			t.Errorf("%s: %d allowed across %d processes, want exactly %d", name, n, procs, childLimit)
		}
	}
}

const childLimit = 100

var childPolicies = []sluice.Policy{
	sluice.FixedWindow{Limit: childLimit, Window: time.Hour},
	sluice.SlidingLog{Limit: childLimit, Window: time.Hour},
	sluice.SlidingWindow{Limit: childLimit, Window: time.Hour},
	sluice.TokenBucket{Capacity: childLimit, Rate: 1, Per: time.Hour},
	sluice.GCRA{Rate: 1, Per: time.Hour, Burst: childLimit},
}

// TestChildProcess is the body of TestMultiProcess's children; run alone it
// does nothing.
func TestChildProcess(t *testing.T) {
	if os.Getenv("SLUICE_CHILD") != "1" {
		return
	}
	n, _ := strconv.Atoi(os.Getenv("SLUICE_N"))
	startNs, _ := strconv.ParseInt(os.Getenv("SLUICE_START"), 10, 64)
	clients := map[string]valkey.Client{
		"standalone": valkeytest.ClientTo(t, os.Getenv("SLUICE_ADDR")),
	}
	cc, err := valkey.NewClient(valkey.ClientOption{InitAddress: strings.Split(os.Getenv("SLUICE_CLUSTER"), ",")})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	clients["cluster"] = cc
	type lim struct {
		name string
		l    *sluice.Limiter
	}
	var lims []lim
	for topo, c := range clients {
		s := newStore(t, c)
		for i, p := range childPolicies {
			l, err := sluice.New(s, p, sluice.WithPrefix(os.Getenv("SLUICE_PREFIX")+":"+topo), sluice.WithTimeout(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			lims = append(lims, lim{fmt.Sprintf("%s/%d-%s", topo, i, l.Rule().Algorithm), l})
		}
	}
	time.Sleep(time.Until(time.Unix(0, startNs)))
	for _, lm := range lims {
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := lm.l.Allow(context.Background(), "hot")
				if err != nil || res.Degraded {
					t.Errorf("%s: %+v, %v", lm.name, res, err)
				}
				if res.Allowed && !res.Degraded {
					allowed.Add(1)
				}
			}()
		}
		wg.Wait()
		fmt.Printf("ALLOWED %s %d\n", lm.name, allowed.Load())
	}
}

// TestFailure checks the failure path: a server that is gone (nothing
// listens on its port) and one that accepts but never answers (stopped
// with SIGSTOP). Each decision comes within the timeout, open or closed as
// configured, and marked Degraded.
func TestFailure(t *testing.T) {
	const timeout = 50 * time.Millisecond
	// A loaded two-core machine may add scheduling delay; the bound is about
	// "not after seconds", not about speed.
	const bound = timeout + 750*time.Millisecond
	for _, mode := range []string{"killed", "paused"} {
		t.Run(mode, func(t *testing.T) {
			srv := valkeytest.Start(t)
			c := srv.Client(t)
			s := newStore(t, c)
			open, _ := sluice.New(s, sluice.GCRA{Rate: 10, Per: time.Second, Burst: 10}, sluice.WithName("open"), sluice.WithTimeout(timeout))
			closed, _ := sluice.New(s, sluice.SlidingLog{Limit: 5, Window: time.Minute}, sluice.WithName("closed"), sluice.WithTimeout(timeout), sluice.WithFailMode(sluice.FailClosed))
			ctx := context.Background()
			// The first decisions on a fresh server may miss 50ms on a loaded
			// machine (connection, script load): wait for a healthy one.
			for _, l := range []*sluice.Limiter{open, closed} {
				deadline := time.Now().Add(5 * time.Second)
				for {
					res, err := l.Allow(ctx, "k")
					if err == nil && res.Allowed && !res.Degraded {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("healthy: %+v, %v", res, err)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			if mode == "killed" {
				srv.Kill(t)
			} else {
				srv.Pause(t)
				defer srv.Resume(t)
			}
			for i := range 5 {
				for _, l := range []*sluice.Limiter{open, closed} {
					begin := time.Now()
					res, err := l.Allow(ctx, "k")
					took := time.Since(begin)
					if err != nil {
						t.Fatalf("%s: %v", l.Name(), err)
					}
					if !res.Degraded || res.Allowed != (l == open) {
						t.Fatalf("%s, call %d: %+v; want degraded and allowed=%v", l.Name(), i, res, l == open)
					}
					if took > bound {
						t.Fatalf("%s, call %d: decided after %v, want within %v", l.Name(), i, took, bound)
					}
				}
			}
		})
	}
}
