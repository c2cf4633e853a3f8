// Command rlsload drives Envoy's rate-limit gRPC protocol
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) at a
// service for a fixed time from a number of concurrent callers, one
// descriptor per call on keys picked at random, and prints calls per
// second and latency percentiles. It is the gRPC load of
// docs/envoy-bench.md; any implementation of the protocol can be measured.
//
//	rlsload -addr 127.0.0.1:8081 -c 64 -d 15s -domain bench -key remote_address -keys 100000
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "gRPC `address` of the service")
	conc := flag.Int("c", 64, "concurrent callers")
	conns := flag.Int("conns", 2, "gRPC connections the callers share")
	dur := flag.Duration("d", 15*time.Second, "duration of the run")
	domain := flag.String("domain", "bench", "rate-limit domain")
	key := flag.String("key", "remote_address", "descriptor key")
	keys := flag.Int("keys", 100000, "distinct descriptor values, picked at random")
	flag.Parse()
	if err := run(*addr, *conc, *conns, *dur, *domain, *key, *keys); err != nil {
		fmt.Fprintln(os.Stderr, "rlsload:", err)
		os.Exit(1)
	}
}

func run(addr string, conc, nconns int, dur time.Duration, domain, key string, keys int) error {
	if conc < 1 || nconns < 1 || keys < 1 {
		return fmt.Errorf("-c, -conns and -keys must be positive")
	}
	clients := make([]rlsv3.RateLimitServiceClient, nconns)
	for i := range clients {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		clients[i] = rlsv3.NewRateLimitServiceClient(conn)
	}
	// One call first: the service is up and the domain is known.
	if _, err := call(clients[0], domain, key, "warmup"); err != nil {
		return fmt.Errorf("first call: %w", err)
	}
	type result struct {
		lat        []time.Duration
		errs, over int
		firstErr   error
	}
	results := make([]result, conc)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(dur)
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[w]
			rng := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			c := clients[w%nconns]
			for time.Now().Before(deadline) {
				v := strconv.Itoa(rng.IntN(keys))
				t0 := time.Now()
				resp, err := call(c, domain, key, v)
				r.lat = append(r.lat, time.Since(t0))
				switch {
				case err != nil:
					r.errs++
					if r.firstErr == nil {
						r.firstErr = err
					}
				case resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT:
					r.over++
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []time.Duration
	errs, over := 0, 0
	var firstErr error
	for _, r := range results {
		all = append(all, r.lat...)
		errs += r.errs
		over += r.over
		if firstErr == nil {
			firstErr = r.firstErr
		}
	}
	slices.Sort(all)
	pct := func(p float64) time.Duration { return all[min(len(all)-1, int(float64(len(all))*p))] }
	fmt.Printf("calls %d in %.1fs: %.0f calls/s, p50 %v, p90 %v, p99 %v, errors %d, over_limit %d\n",
		len(all), elapsed.Seconds(), float64(len(all))/elapsed.Seconds(),
		pct(0.50).Round(time.Microsecond), pct(0.90).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), errs, over)
	if firstErr != nil {
		fmt.Println("first error:", firstErr)
	}
	return nil
}

func call(c rlsv3.RateLimitServiceClient, domain, key, value string) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*commonrl.RateLimitDescriptor{{
		Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: key, Value: value}},
	}}})
}
