package benchmarks

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// The benchmarks run against one valkey-server started by TestMain, or the
// dedicated server named by SLUICE_BENCH_VALKEY (it is FLUSHALLed).
//
//	go test -run '^$' -bench . -benchmem -benchtime 2s
//	go test -run '^$' -bench 'Hot/sluice-gcra/c=128' -cpuprofile cpu.out && go tool pprof -top cpu.out
var benchAddr string

func TestMain(m *testing.M) {
	benchAddr = os.Getenv("SLUICE_BENCH_VALKEY")
	var srv *Server
	if benchAddr == "" {
		var err error
		if srv, err = StartServer(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		benchAddr = srv.Addr
	}
	code := m.Run()
	if srv != nil {
		srv.Stop()
	}
	os.Exit(code)
}

// BenchmarkSpread: 100k keys, each prepared with one decision before the
// timer, picked at random; nothing is refused.
func BenchmarkSpread(b *testing.B) {
	keys := MakeKeys(100_000)
	eachTarget(b, Spread, func(b *testing.B, d Decider) {
		flush(b)
		allowed, err := Prepare(context.Background(), d, keys, 64)
		if err != nil || allowed != int64(len(keys)) {
			b.Fatalf("preparing keys: %d of %d allowed, %v", allowed, len(keys), err)
		}
		eachConcurrency(b, d, keys, false)
	})
}

// BenchmarkHot: one hot key whose limit is never reached.
func BenchmarkHot(b *testing.B) {
	eachTarget(b, Hot, func(b *testing.B, d Decider) {
		eachConcurrency(b, d, []string{"hot"}, false)
	})
}

// BenchmarkRefused: one hot key that is over its limit (10 per hour), so
// every timed decision is a refusal.
func BenchmarkRefused(b *testing.B) {
	eachTarget(b, Refuse, func(b *testing.B, d Decider) {
		for range 20 {
			d.Allow(context.Background(), "refused")
		}
		eachConcurrency(b, d, []string{"refused"}, true)
	})
}

func flush(b *testing.B) {
	a, err := NewAdmin(benchAddr)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	if err := a.FlushAll(context.Background()); err != nil {
		b.Fatal(err)
	}
}

func eachTarget(b *testing.B, p Profile, f func(*testing.B, Decider)) {
	targets, err := Targets("all")
	if err != nil {
		b.Fatal(err)
	}
	for _, t := range targets {
		b.Run(t.Name+"-"+t.Algorithm, func(b *testing.B) {
			d, err := t.Open(Config{Addr: benchAddr, Profile: p, SluiceTimeout: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			f(b, d)
		})
	}
}

// eachConcurrency runs d on keys with 1 goroutine, then with RunParallel at
// about 16 and 128 goroutines (a multiple of GOMAXPROCS). It reports
// decisions/s and the fraction refused and failed; refused says whether
// refusals are expected.
func eachConcurrency(b *testing.B, d Decider, keys []string, refused bool) {
	procs := runtime.GOMAXPROCS(0)
	for _, want := range []int{1, 16, 128} {
		par := max(1, (want+procs-1)/procs)
		c := par * procs
		if want == 1 {
			c = 1
		}
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			ctx := context.Background()
			var denied, errs atomic.Int64
			var seed atomic.Uint64
			// Each goroutine counts apart and adds once: a shared counter
			// would cost more than a refusal from the deny cache.
			loop := func(next func() bool) {
				rng := rand.New(rand.NewPCG(seed.Add(1), 2))
				var nd, ne int64
				for next() {
					out, err := d.Allow(ctx, keys[rng.IntN(len(keys))])
					switch {
					case err != nil:
						ne++
					case out != Allowed:
						nd++
					}
				}
				denied.Add(nd)
				errs.Add(ne)
			}
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			if c == 1 {
				i := 0
				loop(func() bool { i++; return i <= b.N })
			} else {
				b.SetParallelism(par)
				b.RunParallel(func(pb *testing.PB) { loop(pb.Next) })
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
			b.ReportMetric(float64(denied.Load())/float64(b.N), "denied/op")
			b.ReportMetric(float64(errs.Load())/float64(b.N), "errors/op")
			if !refused && denied.Load() > 0 {
				b.Errorf("%d of %d decisions refused under a limit meant never to refuse", denied.Load(), b.N)
			}
		})
	}
}
