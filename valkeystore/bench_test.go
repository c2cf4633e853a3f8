package valkeystore_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
)

// benchPolicies have limits high enough that most decisions are allowed:
// the benchmarks measure decisions, not refusals (except the sliding log,
// which holds one entry per unit, at most MaxSlidingLogLimit: on a hot key,
// past that many units in its 10s window it measures refusals by Valkey).
var benchPolicies = []sluice.Policy{
	sluice.FixedWindow{Limit: 1 << 30, Window: time.Hour},
	sluice.SlidingLog{Limit: driver.MaxSlidingLogLimit, Window: 10 * time.Second},
	sluice.SlidingWindow{Limit: 1 << 30, Window: time.Hour},
	sluice.TokenBucket{Capacity: 1 << 30, Rate: 1e6, Per: time.Second},
	sluice.GCRA{Rate: 1e6, Per: time.Second, Burst: 1 << 30},
}

const benchKeys = 100_000

// BenchmarkAllow measures Limiter.Allow on a real Valkey for every
// algorithm: one hot key and 100k keys, serial and parallel (128
// goroutines), with batching on (the default) and off. cpu-µs/op is the
// test process's CPU time (getrusage) per decision: the client's cost,
// without the server's; srv-cpu-µs/op the server's (INFO cpu), and
// ops/call the decisions per script call (INFO commandstats).
//
//	go test -run '^$' -bench Allow -benchmem ./valkeystore
func BenchmarkAllow(b *testing.B) {
	srv := valkeytest.Start(b)
	c := srv.Client(b)
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	for _, batching := range []int{4, 0} {
		s, err := valkeystore.New(c, valkeystore.WithBatching(batching))
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range benchPolicies {
			// The deny cache is off: these measure decisions by Valkey
			// (BenchmarkDenyCacheHotKey in package sluice measures the cache).
			l, err := sluice.New(s, p, sluice.WithTimeout(10*time.Second), sluice.WithDenyCache(false))
			if err != nil {
				b.Fatal(err)
			}
			for _, keyset := range []string{"hot", "100k"} {
				for _, par := range []bool{false, true} {
					mode := "serial"
					if par {
						mode = "parallel128"
					}
					name := fmt.Sprintf("%s/%s/%s/batching%d", l.Rule().Algorithm, keyset, mode, batching)
					b.Run(name, func(b *testing.B) {
						var next, allowed atomic.Int64
						hot := "hot:" + name + ":" + strconv.Itoa(b.N) // fresh state for every run
						key := func() string {
							if keyset == "hot" {
								return hot
							}
							return keys[next.Add(1)%benchKeys]
						}
						ctx := context.Background()
						b.ReportAllocs()
						cpu, srv := processCPU(), serverStats(b, c)
						b.ResetTimer()
						if par {
							b.SetParallelism(64) // 2 cores × 64 = 128 goroutines
							b.RunParallel(func(pb *testing.PB) {
								for pb.Next() {
									if res, err := l.Allow(ctx, key()); err != nil || res.Degraded {
										b.Errorf("%+v %v", res, err)
										return
									} else if res.Allowed {
										allowed.Add(1)
									}
								}
							})
						} else {
							for b.Loop() {
								if res, err := l.Allow(ctx, key()); err != nil || res.Degraded {
									b.Fatalf("%+v %v", res, err)
								} else if res.Allowed {
									allowed.Add(1)
								}
							}
						}
						b.StopTimer()
						// The client's CPU per decision (getrusage), which
						// the load of a shared machine inflates far less
						// than the time per decision.
						b.ReportMetric(float64(processCPU()-cpu)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
						after := serverStats(b, c)
						b.ReportMetric(float64(after.cpu-srv.cpu)/float64(time.Microsecond)/float64(b.N), "srv-cpu-µs/op")
						if calls := after.calls - srv.calls; calls > 0 {
							b.ReportMetric(float64(b.N)/float64(calls), "ops/call")
						}
						if allowed.Load() == 0 {
							b.Fatal("nothing allowed: the benchmark measured refusals")
						}
					})
				}
			}
		}
	}
}

// stats is what a server has done: its CPU time (user and system) and
// its script calls.
type stats struct {
	cpu   time.Duration
	calls int64
}

var (
	cpuField   = regexp.MustCompile(`(?m)^used_cpu_(?:user|sys):([0-9.]+)`)
	callsField = regexp.MustCompile(`(?m)^cmdstat_eval(?:sha)?:calls=(\d+)`)
)

// serverStats reads the server's stats from INFO cpu and commandstats.
func serverStats(b *testing.B, c valkey.Client) stats {
	info, err := c.Do(context.Background(), c.B().Info().Section("cpu").Section("commandstats").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	var st stats
	for _, m := range cpuField.FindAllStringSubmatch(info, -1) {
		sec, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			b.Fatal(err)
		}
		st.cpu += time.Duration(sec * float64(time.Second))
	}
	for _, m := range callsField.FindAllStringSubmatch(info, -1) {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		st.calls += n
	}
	return st
}

var usedMemory = regexp.MustCompile(`used_memory:(\d+)`)

func memoryUsed(b *testing.B, c valkey.Client) int64 {
	info, err := c.Do(context.Background(), c.B().Info().Section("memory").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	m := usedMemory.FindStringSubmatch(info)
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// BenchmarkMemoryPerKey reports the bytes each algorithm keeps in Valkey per
// key: the used_memory delta over 100k keys after one decision each (two for
// the sliding log, whose state grows with use), and MEMORY USAGE of one key.
//
//	go test -run '^$' -bench MemoryPerKey -benchtime 1x ./valkeystore
func BenchmarkMemoryPerKey(b *testing.B) {
	srv := valkeytest.Start(b)
	c := srv.Client(b)
	s, _ := valkeystore.New(c)
	ctx := context.Background()
	for _, p := range []sluice.Policy{ // long-lived state, so nothing expires while measured
		sluice.FixedWindow{Limit: 100, Window: time.Hour},
		sluice.SlidingLog{Limit: 100, Window: time.Hour},
		sluice.SlidingWindow{Limit: 100, Window: time.Hour},
		sluice.TokenBucket{Capacity: 100, Rate: 100, Per: time.Hour},
		sluice.GCRA{Rate: 100, Per: time.Hour, Burst: 100},
	} {
		l, _ := sluice.New(s, p, sluice.WithTimeout(10*time.Second))
		b.Run(l.Rule().Algorithm.String(), func(b *testing.B) {
			for b.Loop() {
				if err := c.Do(ctx, c.B().Flushall().Sync().Build()).Error(); err != nil {
					b.Fatal(err)
				}
				before := memoryUsed(b, c)
				ops := make([]driver.Op, 0, 1000)
				for i := 0; i < benchKeys; i += 1000 {
					ops = ops[:0]
					for j := i; j < i+1000; j++ {
						ops = append(ops, driver.Op{Key: driver.Key(sluice.DefaultPrefix, l.Name(), l.Rule(), "user:"+strconv.Itoa(j)), Rule: l.Rule(), Cost: 1})
					}
					if err := s.Do(ctx, ops); err != nil {
						b.Fatal(err)
					}
				}
				after := memoryUsed(b, c)
				usage, err := c.Do(ctx, c.B().MemoryUsage().Key(driver.Key(sluice.DefaultPrefix, l.Name(), l.Rule(), "user:1")).Build()).AsInt64()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(after-before)/benchKeys, "used_memory-B/key")
				b.ReportMetric(float64(usage), "MEMORY-USAGE-B")
			}
		})
	}
}

// BenchmarkReplicaAck measures what WithReplicaAck(1) costs: GCRA decisions
// on 100k keys against a primary with one replica, without and with the
// WAIT after each script call, serial and parallel (128 goroutines).
//
//	go test -run '^$' -bench ReplicaAck -benchtime 2s ./valkeystore
func BenchmarkReplicaAck(b *testing.B) {
	primary := valkeytest.Start(b)
	valkeytest.StartReplica(b, primary.Addr)
	c := primary.Client(b)
	for _, ack := range []int{0, 1} {
		s, err := valkeystore.New(c, valkeystore.WithReplicaAck(ack))
		if err != nil {
			b.Fatal(err)
		}
		l, err := sluice.New(s, benchPolicies[4], sluice.WithTimeout(10*time.Second), sluice.WithDenyCache(false),
			sluice.WithName(fmt.Sprintf("ack%d", ack)))
		if err != nil {
			b.Fatal(err)
		}
		for _, par := range []bool{false, true} {
			mode := "serial"
			if par {
				mode = "parallel128"
			}
			b.Run(fmt.Sprintf("ack%d/%s", ack, mode), func(b *testing.B) {
				var next atomic.Int64
				ctx := context.Background()
				decide := func() {
					if res, err := l.Allow(ctx, "user:"+strconv.Itoa(int(next.Add(1)%benchKeys))); err != nil || res.Degraded || !res.Allowed {
						b.Errorf("%+v %v", res, err)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				if par {
					b.SetParallelism(64)
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							decide()
						}
					})
				} else {
					for b.Loop() {
						decide()
					}
				}
			})
		}
	}
}

// BenchmarkSlidingLogMaxCost measures one sliding-log decision that takes
// driver.MaxSlidingLogLimit units at once on a fresh key (the worst a
// client-chosen cost can ask of Valkey: the script runs while Valkey serves
// nobody else), and the memory of the resulting key per entry (MEMORY
// USAGE, and used_memory's delta).
//
//	go test -run '^$' -bench SlidingLogMaxCost -benchtime 20x ./valkeystore
func BenchmarkSlidingLogMaxCost(b *testing.B) {
	srv := valkeytest.Start(b)
	c := srv.Client(b)
	s, _ := valkeystore.New(c)
	ctx := context.Background()
	const n = driver.MaxSlidingLogLimit
	l, err := sluice.New(s, sluice.SlidingLog{Limit: n, Window: time.Hour}, sluice.WithTimeout(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	var bytes, used int64
	i := 0
	for b.Loop() {
		i++
		key := "user:" + strconv.Itoa(i)
		b.StopTimer()
		before := memoryUsed(b, c)
		b.StartTimer()
		ops := []driver.Op{{Key: driver.Key(sluice.DefaultPrefix, l.Name(), l.Rule(), key), Rule: l.Rule(), Cost: n}}
		if err := s.Do(ctx, ops); err != nil || ops[0].Err != nil || !ops[0].Result.Allowed {
			b.Fatal(err, ops[0].Err, ops[0].Result)
		}
		b.StopTimer()
		used += memoryUsed(b, c) - before
		usage, err := c.Do(ctx, c.B().MemoryUsage().Key(driver.Key(sluice.DefaultPrefix, l.Name(), l.Rule(), key)).Samples(0).Build()).AsInt64()
		if err != nil {
			b.Fatal(err)
		}
		bytes += usage
		b.StartTimer()
	}
	// Valkey's own time in the script (commandstats), which the load of
	// the machine the client runs on does not inflate as much.
	info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if strings.HasPrefix(line, "cmdstat_evalsha:") || strings.HasPrefix(line, "cmdstat_eval:") {
			if f := strings.Split(line, "usec_per_call="); len(f) == 2 {
				if us, err := strconv.ParseFloat(strings.SplitN(f[1], ",", 2)[0], 64); err == nil {
					b.ReportMetric(us, strings.SplitN(line, ":", 2)[0][len("cmdstat_"):]+"-us/call")
				}
			}
		}
	}
	b.ReportMetric(float64(bytes)/float64(i)/n, "MEMORY-USAGE-B/entry")
	b.ReportMetric(float64(used)/float64(i)/n, "used_memory-B/entry")
}
