// Command callcost sends GCRA decisions to Valkey through valkeystore
// without batching, in calls of exactly -keys decisions (one Do each), from
// -conc goroutines for -duration, and prints one Markdown row: decisions
// per script call, the servers' time in script calls per decision (INFO
// commandstats) and their CPU time per decision (INFO cpu), and
// decisions/s. With batches of a fixed size, it separates the server's cost
// per key from what batching changes. Keys are drawn from 100k: of random
// slots, of -tags hash tags, or of one slot (-tags 1). On a cluster, a call
// of keys of several slots runs the Cross script. benchmarks/cluster-callcost.sh
// runs it against one server and a 1-primary Cluster.
//
//	callcost -addr 127.0.0.1:6379 [-cluster] -keys 16 -tags 2 -label "..."
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/valkey-io/valkey-go"
)

const keySpace = 100_000

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "a Valkey server or cluster node")
	cluster := flag.Bool("cluster", false, "the server is a cluster node")
	perCall := flag.Int("keys", 16, "decisions per call")
	conc := flag.Int("conc", 4, "goroutines")
	dur := flag.Duration("duration", 3*time.Second, "how long")
	tags := flag.Int("tags", 0, "keys of this many hash tags (0: of random slots)")
	interval := flag.Duration("interval", time.Microsecond, "the GCRA interval: 1µs lets keys expire about a second after their last take, 2s keeps every key for the run")
	label := flag.String("label", "", "the row's label")
	flag.Parse()
	if err := run(*addr, *cluster, *perCall, *conc, *dur, *tags, *interval, *label); err != nil {
		fmt.Fprintln(os.Stderr, "callcost:", err)
		os.Exit(1)
	}
}

func run(addr string, cluster bool, perCall, conc int, dur time.Duration, tags int, interval time.Duration, label string) error {
	if perCall < 1 || conc < 1 || tags < 0 {
		return fmt.Errorf("-keys and -conc must be positive and -tags not negative")
	}
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: !cluster})
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := valkeystore.New(c, valkeystore.WithBatching(0), valkeystore.WithMaxKeysPerCall(perCall))
	if err != nil {
		return err
	}
	rule := sluice.Rule{Algorithm: driver.AlgorithmGCRA, Limit: 1_000_000, Interval: interval}
	key := func(i int) string {
		if tags > 0 {
			return "callcost:{" + strconv.Itoa(i%tags) + "}:" + strconv.Itoa(i)
		}
		return "callcost:" + strconv.Itoa(i)
	}
	decide := func(ops []driver.Op) error {
		for j := range ops {
			ops[j] = driver.Op{Key: key(rand.IntN(keySpace)), Rule: rule, Cost: 1}
		}
		if err := s.Do(context.Background(), ops); err != nil {
			return err
		}
		for j := range ops {
			if ops[j].Err != nil {
				return ops[j].Err
			}
		}
		return nil
	}
	warm := make([]driver.Op, perCall)
	for range keySpace / perCall { // the keys exist, and the script is loaded
		if err := decide(warm); err != nil {
			return err
		}
	}
	before, err := stats(c)
	if err != nil {
		return err
	}
	var (
		n     atomic.Int64
		wg    sync.WaitGroup
		first atomic.Value
	)
	end := time.Now().Add(dur)
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ops := make([]driver.Op, perCall)
			for time.Now().Before(end) {
				if err := decide(ops); err != nil {
					first.CompareAndSwap(nil, err)
					return
				}
				n.Add(int64(perCall))
			}
		}()
	}
	wg.Wait()
	if err, _ := first.Load().(error); err != nil {
		return err
	}
	after, err := stats(c)
	if err != nil {
		return err
	}
	d := float64(n.Load())
	fmt.Printf("| %s | %.1f | %.2f | %.2f | %.0f/s |\n", label, d/float64(after.calls-before.calls),
		float64(after.usec-before.usec)/d, (after.cpu-before.cpu)*1e6/d, d/dur.Seconds())
	return nil
}

type serverStats struct {
	calls, usec int64   // script calls and their time, in µs (commandstats)
	cpu         float64 // used_cpu_user + used_cpu_sys, in seconds
}

// stats sums INFO cpu and the script calls of INFO commandstats over the
// client's nodes.
func stats(c valkey.Client) (serverStats, error) {
	var st serverStats
	for addr, n := range c.Nodes() {
		info, err := n.Do(context.Background(), n.B().Info().Section("cpu").Section("commandstats").Build()).ToString()
		if err != nil {
			return st, fmt.Errorf("INFO from %s: %w", addr, err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			name, val, _ := strings.Cut(line, ":")
			switch name {
			case "cmdstat_evalsha", "cmdstat_eval":
				for _, f := range strings.Split(val, ",") {
					k, v, _ := strings.Cut(f, "=")
					x, _ := strconv.ParseInt(v, 10, 64)
					switch k {
					case "calls":
						st.calls += x
					case "usec":
						st.usec += x
					}
				}
			case "used_cpu_user", "used_cpu_sys":
				x, _ := strconv.ParseFloat(val, 64)
				st.cpu += x
			}
		}
	}
	return st, nil
}
