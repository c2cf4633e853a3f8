package valkeystore_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
)

// BenchmarkInFlightCycle measures, in one run on one Valkey, a token-bucket
// decision (Allow) beside an in-flight cycle (Acquire then Release, two
// script calls), serially over 100k keys: ns/op of each, and Valkey's own
// time per script call (us/call, from INFO commandstats' usec and calls,
// reset before each).
//
//	go test -run '^$' -bench InFlightCycle -count 3 ./valkeystore
func BenchmarkInFlightCycle(b *testing.B) {
	srv := valkeytest.Start(b)
	c := srv.Client(b)
	s, err := valkeystore.New(c)
	if err != nil {
		b.Fatal(err)
	}
	opts := []sluice.Option{sluice.WithTimeout(10 * time.Second), sluice.WithDenyCache(false)}
	bucket, err := sluice.New(s, sluice.TokenBucket{Capacity: 1 << 30, Rate: 1e6, Per: time.Second}, opts...)
	if err != nil {
		b.Fatal(err)
	}
	inflight, err := sluice.New(s, sluice.InFlight{Limit: 20, Lease: 30 * time.Second}, opts...)
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	ctx := context.Background()
	b.Run("token_bucket", func(b *testing.B) {
		resetStats(b, c)
		i := 0
		for b.Loop() {
			if res, err := bucket.Allow(ctx, keys[i%benchKeys]); err != nil || res.Degraded || !res.Allowed {
				b.Fatalf("%+v %v", res, err)
			}
			i++
		}
		b.StopTimer()
		reportScriptTime(b, c)
	})
	b.Run("in_flight_acquire_release", func(b *testing.B) {
		resetStats(b, c)
		i := 0
		for b.Loop() {
			ls, res, err := inflight.Acquire(ctx, keys[i%benchKeys])
			if err != nil || ls == nil || res.Degraded {
				b.Fatalf("%+v %v", res, err)
			}
			if ok, err := ls.Release(ctx); !ok || err != nil {
				b.Fatalf("release: %v %v", ok, err)
			}
			i++
		}
		b.StopTimer()
		reportScriptTime(b, c)
	})
}

func resetStats(b *testing.B, c valkey.Client) {
	if err := c.Do(context.Background(), c.B().ConfigResetstat().Build()).Error(); err != nil {
		b.Fatal(err)
	}
}

var evalshaStats = regexp.MustCompile(`(?m)^cmdstat_evalsha:calls=(\d+),usec=(\d+)`)

// reportScriptTime reports Valkey's time per script call since resetStats.
func reportScriptTime(b *testing.B, c valkey.Client) {
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	m := evalshaStats.FindStringSubmatch(info)
	if m == nil {
		b.Fatal("no EVALSHA in INFO commandstats")
	}
	calls, _ := strconv.ParseFloat(m[1], 64)
	usec, _ := strconv.ParseFloat(m[2], 64)
	b.ReportMetric(usec/calls, "valkey-us/call")
	b.ReportMetric(calls/float64(b.N), "calls/op")
}
