package luascript_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/luascript"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
)

// costPolicies are the rules BenchmarkScriptCost decides: every script,
// with limits high enough that most decisions are allowed and write their
// key (the sliding log's is its highest; its 10s log grows with the run).
var costPolicies = []struct {
	name   string
	policy sluice.Policy
}{
	{"fixed_window", sluice.FixedWindow{Limit: 1_000_000, Window: time.Second}},
	{"gcra", sluice.GCRA{Rate: 1e6, Per: time.Second, Burst: 1 << 20}},
	{"token_bucket", sluice.TokenBucket{Capacity: 1 << 20, Rate: 1e6, Per: time.Second}},
	{"sliding_window", sluice.SlidingWindow{Limit: 1_000_000, Window: time.Second}},
	{"sliding_log", sluice.SlidingLog{Limit: driver.MaxSlidingLogLimit, Window: 10 * time.Second}},
	{"calendar", sluice.FixedWindow{Limit: 1_000_000, Calendar: sluice.Calendar{Unit: sluice.Day, Zone: time.UTC}}},
	{"inflight", sluice.InFlight{Limit: driver.MaxInFlightLimit, Lease: 100 * time.Millisecond}},
}

// costKeys is the number of keys each benchmark cycles through: every key
// is decided again within the run, so most decisions find state.
const costKeys = 10_000

// BenchmarkScriptCost measures what Valkey spends per decision in each
// script (one.lua's ending), without a store: calls of 1, 8 and 16
// distinct keys, EVALSHA through valkey-go from 8 goroutines, arguments
// written by AppendArgs with the server's TIME deciding, as valkeystore
// sends them. script-µs/decision is EVALSHA's usec in INFO commandstats
// (the script's own time, with the commands it calls) per decision;
// srv-cpu-µs/decision the server's CPU time (INFO cpu, user and system:
// with reading, parsing and replying) per decision. Speed is reported,
// never asserted; compare builds side by side (benchmarks/script-cost.sh).
//
//	go test -run '^$' -bench ScriptCost ./luascript
func BenchmarkScriptCost(b *testing.B) {
	c := valkeytest.Start(b).Client(b)
	ctx := context.Background()
	for _, cp := range costPolicies {
		rule, err := cp.policy.Rule()
		if err != nil {
			b.Fatal(err)
		}
		sc := luascript.ForRule(&rule)
		if err := c.Do(ctx, c.B().ScriptLoad().Script(sc.Src).Build()).Error(); err != nil {
			b.Fatal(err)
		}
		for _, n := range []int{1, 8, 16} {
			b.Run(fmt.Sprintf("%s/keys%d", cp.name, n), func(b *testing.B) {
				benchScript(b, c, sc, rule, n)
			})
		}
	}
}

// benchScript runs b.N decisions of rule in calls of n keys and reports
// the server's cost per decision.
func benchScript(b *testing.B, c valkey.Client, sc *luascript.Script, rule sluice.Rule, n int) {
	prefix := "cost:" + b.Name() + ":" + strconv.Itoa(b.N) + ":"
	keys := make([]string, costKeys)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
	}
	var next, lease atomic.Int64
	calls := (b.N + n - 1) / n
	var left atomic.Int64
	left.Store(int64(calls))
	before := scriptStats(b, c)
	b.ResetTimer()
	b.SetParallelism(4) // 2 cores × 4: calls in flight, as a store's are
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		var args []byte
		ks := make([]string, n)
		for pb.Next() {
			if left.Add(-1) < 0 {
				continue
			}
			args = args[:0]
			first := next.Add(int64(n)) - int64(n)
			for j := range ks {
				ks[j] = keys[(first+int64(j))%costKeys]
				op := driver.Op{Key: ks[j], Rule: rule, Cost: 1}
				if rule.Algorithm == driver.AlgorithmInFlight {
					id := lease.Add(1)
					op.Lease = driver.LeaseID{byte(id), byte(id >> 8), byte(id >> 16), byte(id >> 24), byte(id >> 32)}
				}
				args = luascript.AppendArgs(args, &op, 0, 0, time.Now())
			}
			reply, err := c.Do(ctx, c.B().Evalsha().Sha1(sc.SHA).Numkeys(int64(n)).Key(ks...).Arg(string(args)).Build()).ToString()
			if err == nil && len(reply) != n*luascript.RecordSize {
				err = fmt.Errorf("reply of %d bytes for %d keys", len(reply), n)
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	after := scriptStats(b, c)
	decisions := float64(calls * n)
	if got := after.calls - before.calls; got != int64(calls) {
		b.Fatalf("%d EVALSHA calls counted, want %d", got, calls)
	}
	b.ReportMetric(float64(after.usec-before.usec)/decisions, "script-µs/decision")
	b.ReportMetric(float64(after.cpu-before.cpu)/float64(time.Microsecond)/decisions, "srv-cpu-µs/decision")
}

// costStats is what a server has spent: CPU time (user and system) and
// EVALSHA's calls and microseconds.
type costStats struct {
	cpu         time.Duration
	calls, usec int64
}

var (
	costCPU     = regexp.MustCompile(`(?m)^used_cpu_(?:user|sys):([0-9.]+)`)
	costEvalsha = regexp.MustCompile(`(?m)^cmdstat_evalsha:calls=(\d+),usec=(\d+),`)
)

func scriptStats(b *testing.B, c valkey.Client) costStats {
	info, err := c.Do(context.Background(), c.B().Info().Section("cpu").Section("commandstats").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	var st costStats
	for _, m := range costCPU.FindAllStringSubmatch(info, -1) {
		sec, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			b.Fatal(err)
		}
		st.cpu += time.Duration(sec * float64(time.Second))
	}
	if m := costEvalsha.FindStringSubmatch(info); m != nil {
		st.calls, _ = strconv.ParseInt(m[1], 10, 64)
		st.usec, _ = strconv.ParseInt(m[2], 10, 64)
	}
	return st
}
