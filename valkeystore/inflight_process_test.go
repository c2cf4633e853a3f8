package valkeystore_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
)

// The in-flight tests across OS processes: several processes holding
// leases of one key at once, and a holder killed with SIGKILL.

const ifLimit = 5

// ifChild starts this test binary as a child running TestInFlightChild in
// mode, with env, and returns it with its stdout.
func ifChild(t *testing.T, mode string, env ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestInFlightChild$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), "SLUICE_IF_CHILD="+mode), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, bufio.NewScanner(out)
}

// topologies are the servers the process tests run on, by name, with the
// environment a child needs to reach them.
func topologies(t *testing.T) map[string]string {
	return map[string]string{
		"standalone": "SLUICE_IF_ADDR=" + valkeytest.Shared(t).Addr,
		"cluster":    "SLUICE_IF_CLUSTER=" + strings.Join(valkeytest.SharedCluster(t).Addrs, ","),
	}
}

// clientFromEnv is the client a child reaches its server with.
func clientFromEnv(t *testing.T) valkey.Client {
	if a := os.Getenv("SLUICE_IF_ADDR"); a != "" {
		return valkeytest.ClientTo(t, a)
	}
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: strings.Split(os.Getenv("SLUICE_IF_CLUSTER"), ",")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func ifLimiter(t testing.TB, c valkey.Client, prefix string, lease time.Duration) *sluice.Limiter {
	l, err := sluice.New(newStore(t, c), sluice.InFlight{Limit: ifLimit, Lease: lease}, sluice.WithPrefix(prefix), sluice.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestInFlightMultiProcess: three processes of eight goroutines each take
// leases of one key (Limit 5) and hold them for random durations up to
// 20ms, for a second, on a standalone server and on a cluster. By the
// holders' own timestamps (taken after Acquire returned and before
// Release was called) never more than 5 are held at once, and freed slots
// are taken again promptly: on average at least half the slots are held.
func TestInFlightMultiProcess(t *testing.T) {
	const procs, workers = 3, 8
	const run = time.Second
	for topo, env := range topologies(t) {
		t.Run(topo, func(t *testing.T) {
			prefix := sluicetest.Prefix(t)
			start := time.Now().Add(time.Second)
			var (
				mu    sync.Mutex
				spans [][2]int64
				wg    sync.WaitGroup
			)
			for range procs {
				cmd, sc := ifChild(t, "hold", env, "SLUICE_IF_PREFIX="+prefix,
					"SLUICE_IF_START="+strconv.FormatInt(start.UnixNano(), 10),
					"SLUICE_IF_RUN="+run.String(), "SLUICE_IF_WORKERS="+strconv.Itoa(workers))
				wg.Add(1)
				go func() {
					defer wg.Done()
					for sc.Scan() {
						var from, to int64
						if _, err := fmt.Sscanf(sc.Text(), "SPAN %d %d", &from, &to); err == nil {
							mu.Lock()
							spans = append(spans, [2]int64{from, to})
							mu.Unlock()
						}
					}
					if err := cmd.Wait(); err != nil {
						t.Errorf("child: %v", err)
					}
				}()
			}
			wg.Wait()
			maxAt, mean := overlap(spans, start.UnixNano(), start.Add(run).UnixNano())
			t.Logf("%d leases held across %d processes; at most %d at once, %.2f on average", len(spans), procs, maxAt, mean)
			if maxAt > ifLimit {
				t.Errorf("%d leases held at once, want at most %d", maxAt, ifLimit)
			}
			if mean < ifLimit/2.0 {
				t.Errorf("%.2f leases held on average, want at least %v: freed slots are not taken again promptly", mean, ifLimit/2.0)
			}
			if len(spans) < 50 {
				t.Errorf("only %d leases taken", len(spans))
			}
		})
	}
}

// overlap returns the most spans that overlap at once, and the mean number
// held over [from, to).
func overlap(spans [][2]int64, from, to int64) (int, float64) {
	type ev struct {
		t int64
		d int
	}
	var evs []ev
	for _, s := range spans {
		evs = append(evs, ev{s[0], 1}, ev{s[1], -1})
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].t == evs[j].t {
			return evs[i].d < evs[j].d // an end before a start at one instant
		}
		return evs[i].t < evs[j].t
	})
	cur, maxAt := 0, 0
	var area float64
	last := from
	for _, e := range evs {
		if e.t > last && e.t <= to {
			area += float64(cur) * float64(e.t-last)
			last = e.t
		}
		cur += e.d
		maxAt = max(maxAt, cur)
	}
	if to > last {
		area += float64(cur) * float64(to-last)
	}
	return maxAt, area / float64(to-from)
}

// crashMargin bounds the time after a killed holder's leases end until
// another process is admitted (polling every 5ms): wide, for a loaded
// two-core machine; the measured margin is logged.
const crashMargin = 500 * time.Millisecond

// TestInFlightCrash: a process holding all 5 leases of a key (Lease
// 1.5s) is killed with SIGKILL. Another process is refused until the
// leases end (Lease after the first acquire was sent, by the shared
// machine clock Valkey reads too) and admitted within Lease of the last
// acquire's return plus crashMargin.
func TestInFlightCrash(t *testing.T) {
	const lease = 1500 * time.Millisecond
	for topo, env := range topologies(t) {
		t.Run(topo, func(t *testing.T) {
			prefix := sluicetest.Prefix(t)
			cmd, sc := ifChild(t, "crash", env, "SLUICE_IF_PREFIX="+prefix, "SLUICE_IF_LEASE="+lease.String())
			var sent, held int64
			for sc.Scan() {
				if _, err := fmt.Sscanf(sc.Text(), "HELD %d %d", &sent, &held); err == nil {
					break
				}
			}
			if held == 0 {
				t.Fatal("the child did not report its leases")
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			l := ifLimiter(t, clientFromAddrs(t, env), prefix, lease)
			ctx := context.Background()
			earliest := time.Unix(0, sent).Add(lease) // no lease ends sooner
			latest := time.Unix(0, held).Add(lease)   // every lease has ended by then
			refused := 0
			for {
				before := time.Now()
				ls, res, err := l.Acquire(ctx, "job")
				if err != nil || res.Degraded {
					t.Fatalf("Acquire: %+v, %v", res, err)
				}
				if ls != nil {
					if before.Before(earliest.Add(-5 * time.Millisecond)) {
						t.Fatalf("admitted %v before the killed holder's leases could end", earliest.Sub(before))
					}
					margin := time.Since(latest)
					t.Logf("killed %v after the leases were taken; refused %d times; admitted %v after Lease had passed for every lease",
						killed.Sub(time.Unix(0, held)), refused, margin)
					if margin > crashMargin {
						t.Errorf("admitted %v after the leases ended, want within %v", margin, crashMargin)
					}
					break
				}
				refused++
				if res.RetryAfter <= 0 || time.Now().Add(res.RetryAfter).After(latest.Add(time.Second)) {
					t.Fatalf("refused with RetryAfter %v: the leases end within %v", res.RetryAfter, time.Until(latest))
				}
				if time.Since(killed) > lease+10*time.Second {
					t.Fatal("never admitted")
				}
				time.Sleep(5 * time.Millisecond)
			}
			if refused == 0 {
				t.Error("never refused while the killed holder's leases lived")
			}
		})
	}
}

func clientFromAddrs(t *testing.T, env string) valkey.Client {
	k, v, _ := strings.Cut(env, "=")
	if k == "SLUICE_IF_ADDR" {
		return valkeytest.ClientTo(t, v)
	}
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: strings.Split(v, ",")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestInFlightChild is the body of the process tests' children; run alone
// it does nothing.
func TestInFlightChild(t *testing.T) {
	mode := os.Getenv("SLUICE_IF_CHILD")
	if mode == "" {
		return
	}
	prefix := os.Getenv("SLUICE_IF_PREFIX")
	ctx := context.Background()
	switch mode {
	case "crash":
		lease, _ := time.ParseDuration(os.Getenv("SLUICE_IF_LEASE"))
		l := ifLimiter(t, clientFromEnv(t), prefix, lease)
		sent := time.Now()
		for i := range ifLimit {
			ls, res, err := l.Acquire(ctx, "job")
			if err != nil || ls == nil || res.Degraded {
				t.Fatalf("lease %d: %+v, %v", i, res, err)
			}
		}
		fmt.Printf("HELD %d %d\n", sent.UnixNano(), time.Now().UnixNano())
		time.Sleep(time.Hour) // until killed
	case "hold":
		l := ifLimiter(t, clientFromEnv(t), prefix, 10*time.Second)
		startNs, _ := strconv.ParseInt(os.Getenv("SLUICE_IF_START"), 10, 64)
		run, _ := time.ParseDuration(os.Getenv("SLUICE_IF_RUN"))
		workers, _ := strconv.Atoi(os.Getenv("SLUICE_IF_WORKERS"))
		start := time.Unix(0, startNs)
		time.Sleep(time.Until(start))
		var mu sync.Mutex
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := time.Duration(w+1) * 2500 * time.Microsecond // 2.5ms to 20ms
				for time.Since(start) < run {
					ls, res, err := l.Acquire(ctx, "hot")
					if err != nil || res.Degraded {
						t.Errorf("Acquire: %+v, %v", res, err)
						return
					}
					if ls == nil {
						time.Sleep(time.Millisecond)
						continue
					}
					from := time.Now()
					time.Sleep(d)
					to := time.Now()
					if ok, err := ls.Release(ctx); !ok || err != nil {
						t.Errorf("Release: %v, %v", ok, err)
					}
					mu.Lock()
					fmt.Printf("SPAN %d %d\n", from.UnixNano(), to.UnixNano())
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
}
