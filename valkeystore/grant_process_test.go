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
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
)

// Grants across OS processes on a real Valkey, standalone and a Cluster of
// three primaries with a replica each: what every process admitted, by its
// own timestamps, never passes the policy over any interval; and a process
// SIGKILLed holding a grant holds the key's room no longer than the
// grant's life.

var grantPolicies = map[string]sluice.Policy{
	"bucket": sluice.TokenBucket{Capacity: 200, Rate: 2000, Per: time.Second},
	"window": sluice.FixedWindow{Limit: 300, Window: 200 * time.Millisecond},
}

// grantChild starts this test binary as a child running TestGrantChild.
func grantChild(t *testing.T, env ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestGrantChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
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

func grantLimiter(t testing.TB, c valkey.Client, prefix, policy string, life time.Duration) *sluice.Limiter {
	l, err := sluice.New(newStore(t, c), grantPolicies[policy], sluice.WithPrefix(prefix), sluice.WithName("g"),
		sluice.WithTimeout(5*time.Second), sluice.WithGrants(sluice.GrantOptions{Life: life}))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// admission is one allowed decision of a child: the decision happened
// between from and to (Unix nanoseconds, this host's clock).
type admission struct{ from, to int64 }

// TestGrantsMultiProcess: four processes of four goroutines each hammer one
// key for a second, on a standalone server and on a 3+3 cluster, under a
// token bucket and a fixed window. No interval's admissions pass the
// policy (an admission counts in an interval when its whole span does).
func TestGrantsMultiProcess(t *testing.T) {
	const procs = 4
	const run = time.Second
	cluster := valkeytest.StartCluster(t, 3, valkeytest.WithReplicas(1))
	topos := map[string]string{
		"standalone": "SLUICE_IF_ADDR=" + valkeytest.Shared(t).Addr,
		"cluster3+3": "SLUICE_IF_CLUSTER=" + strings.Join(cluster.Addrs, ","),
	}
	for topo, env := range topos {
		for name := range grantPolicies {
			t.Run(topo+"/"+name, func(t *testing.T) {
				prefix := sluicetest.Prefix(t)
				start := time.Now().Add(time.Second)
				var mu sync.Mutex
				var adm []admission
				var calls, decisions int64
				var wg sync.WaitGroup
				for range procs {
					cmd, sc := grantChild(t, env, "SLUICE_GRANT_CHILD=hammer", "SLUICE_GRANT_PREFIX="+prefix, "SLUICE_GRANT_POLICY="+name,
						"SLUICE_GRANT_START="+strconv.FormatInt(start.UnixNano(), 10), "SLUICE_GRANT_RUN="+run.String())
					wg.Add(1)
					go func() {
						defer wg.Done()
						for sc.Scan() {
							var a admission
							var c, d int64
							if _, err := fmt.Sscanf(sc.Text(), "A %d %d", &a.from, &a.to); err == nil {
								mu.Lock()
								adm = append(adm, a)
								mu.Unlock()
							} else if _, err := fmt.Sscanf(sc.Text(), "STATS %d %d", &c, &d); err == nil {
								mu.Lock()
								calls, decisions = calls+c, decisions+d
								mu.Unlock()
							}
						}
						if err := cmd.Wait(); err != nil {
							t.Errorf("child: %v", err)
						}
					}()
				}
				wg.Wait()
				rule, _ := grantPolicies[name].Rule()
				checkAdmissions(t, rule, adm)
				t.Logf("%d admitted of %d decisions by %d processes, %d grant calls (%.0f decisions per call)",
					len(adm), decisions, procs, calls, float64(decisions)/float64(max(calls, 1)))
			})
		}
	}
}

// checkAdmissions checks every interval from one admission's start to
// another's end: for a bucket at most burst + rate × its length; for a
// window, each window's at most the limit.
func checkAdmissions(t *testing.T, rule sluice.Rule, adm []admission) {
	t.Helper()
	if len(adm) == 0 {
		t.Fatal("nothing admitted")
	}
	if !rule.Algorithm.Rated() {
		per := map[int64]int64{}
		for _, a := range adm {
			s, e := rule.Span(time.Unix(0, a.from))
			if a.to < e.UnixNano() { // wholly within one window
				per[s.UnixNano()]++
			}
		}
		for s, n := range per {
			if n > rule.Limit {
				t.Errorf("window at %v admitted %d, limit %d", time.Unix(0, s), n, rule.Limit)
			}
		}
		return
	}
	sort.Slice(adm, func(i, j int) bool { return adm[i].from < adm[j].from })
	ends := make([]int64, len(adm))
	for i, a := range adm {
		ends[i] = a.to
	}
	iv := rule.Interval.Nanoseconds()
	// For each start i, the admissions from i on that ended by each end:
	// sampled every 16th start (O(n²/16) on a few thousand admissions).
	for i := 0; i < len(adm); i += 16 {
		var in []int64
		for j := i; j < len(adm); j++ {
			in = append(in, adm[j].to)
		}
		sort.Slice(in, func(a, b int) bool { return in[a] < in[b] })
		for k, end := range in {
			if n := int64(k + 1); n > rule.Limit+(end-adm[i].from)/iv {
				t.Fatalf("%d admitted within %v (from admission %d), the policy allows %d", n, time.Duration(end-adm[i].from), i, rule.Limit+(end-adm[i].from)/iv)
			}
		}
	}
}

// TestGrantKilledHolder: a process takes a grant of a bucket and is
// SIGKILLed holding it. Its grant's end, read in Valkey, is within the
// grant's life of the kill; before it, another process cannot burst beyond
// the room the dead one left; after it, it bursts the whole capacity.
func TestGrantKilledHolder(t *testing.T) {
	const life = time.Second
	c := valkeytest.Shared(t).Client(t)
	prefix := sluicetest.Prefix(t)
	cmd, sc := grantChild(t, "SLUICE_IF_ADDR="+valkeytest.Shared(t).Addr, "SLUICE_GRANT_CHILD=hold", "SLUICE_GRANT_PREFIX="+prefix)
	var held int64
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "HELD %d", &held); err == nil {
			break
		}
	}
	killed := time.Now()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	rule, _ := grantPolicies["bucket"].Rule()
	key := driver.GrantKey(prefix, "g", rule, "k")
	h, err := c.Do(context.Background(), c.B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil || len(h) == 0 {
		t.Fatalf("grant state of %s: %v, %v", key, h, err)
	}
	var end, g int64
	for f, v := range h {
		if strings.HasPrefix(f, "h:") {
			var s int64
			fmt.Sscanf(v, "%d %d %d", &g, &end, &s)
			t.Logf("the killed holder's record: %d units, grant ends %v after the kill", g, time.Duration(end*1000-killed.UnixNano()))
		}
	}
	stuck := time.Duration(end*1000 - killed.UnixNano())
	if stuck > life+5*time.Millisecond {
		t.Errorf("the killed holder's grant ends %v after the kill, beyond its life %v", stuck, life)
	}
	t.Logf("margin: the room came back %v before a grant's life after the kill", life-stuck)

	l := grantLimiter(t, c, prefix, "bucket", life)
	time.Sleep(150 * time.Millisecond) // the level refills up to the room left
	before, took := burst(t, l)
	time.Sleep(time.Until(time.UnixMicro(end)) + 250*time.Millisecond)
	after, _ := burst(t, l)
	t.Logf("the dead holder held %d units (%d counted by the store): a burst before its grant ended admitted %d, after %d", held, g, before, after)
	// The burst took its time, in which the bucket refilled.
	if room := rule.Limit - g + 2 + int64(took/rule.Interval); before > room {
		t.Errorf("burst before the grant's end admitted %d in %v, beyond the room of %d", before, took, room)
	}
	if after < rule.Limit {
		t.Errorf("burst after the grant's end admitted %d, want the whole capacity %d", after, rule.Limit)
	}
}

// burst makes 300 decisions as fast as it can, and returns how many were
// allowed and the time it took.
func burst(t *testing.T, l *sluice.Limiter) (int64, time.Duration) {
	var n int64
	start := time.Now()
	for range 300 {
		res, err := l.Allow(context.Background(), "k")
		if err != nil || res.Degraded {
			t.Fatalf("Allow: %+v, %v", res, err)
		}
		if res.Allowed {
			n++
		}
	}
	return n, time.Since(start)
}

// TestGrantChild is a child process of the tests above (SLUICE_GRANT_CHILD).
func TestGrantChild(t *testing.T) {
	mode := os.Getenv("SLUICE_GRANT_CHILD")
	if mode == "" {
		return
	}
	prefix := os.Getenv("SLUICE_GRANT_PREFIX")
	ctx := context.Background()
	switch mode {
	case "hold":
		l := grantLimiter(t, clientFromEnv(t), prefix, "bucket", time.Second)
		var admitted int64
		for admitted < 60 {
			if res, err := l.Allow(ctx, "k"); err != nil || !res.Allowed {
				t.Fatalf("Allow: %+v, %v", res, err)
			}
			admitted++
		}
		time.Sleep(5 * time.Millisecond) // the background renewal lands
		s := l.GrantStats()
		fmt.Printf("HELD %d\n", s.Granted-admitted)
		time.Sleep(time.Hour) // until killed
	case "hammer":
		l := grantLimiter(t, clientFromEnv(t), prefix, os.Getenv("SLUICE_GRANT_POLICY"), time.Second)
		startNs, _ := strconv.ParseInt(os.Getenv("SLUICE_GRANT_START"), 10, 64)
		run, _ := time.ParseDuration(os.Getenv("SLUICE_GRANT_RUN"))
		start := time.Unix(0, startNs)
		time.Sleep(time.Until(start))
		var mu sync.Mutex
		var wg sync.WaitGroup
		var decisions int64
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var lines []string
				var n int64
				for time.Since(start) < run {
					from := time.Now().UnixNano()
					res, err := l.Allow(ctx, "k")
					if err != nil || res.Degraded {
						t.Errorf("Allow: %+v, %v", res, err)
						return
					}
					n++
					if res.Allowed {
						lines = append(lines, fmt.Sprintf("A %d %d", from, time.Now().UnixNano()))
					}
				}
				mu.Lock()
				decisions += n
				for _, s := range lines {
					fmt.Println(s)
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		_ = l.Close()
		fmt.Printf("STATS %d %d\n", l.GrantStats().Calls, decisions)
	}
}
