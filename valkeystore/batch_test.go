package valkeystore_test

import (
	"context"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
)

// scriptCalls returns how many EVALSHA and EVAL calls the server ran.
func scriptCalls(t *testing.T, c valkey.Client) int {
	t.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range regexp.MustCompile(`cmdstat_(?:evalsha|eval):calls=(\d+)`).FindAllStringSubmatch(info, -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
	}
	return n
}

// TestBatchingMerges sends many concurrent decisions through a batching
// store: they must all be exact (exactly the limit allowed on a hot key) and
// share script calls (fewer calls than decisions).
func TestBatchingMerges(t *testing.T) {
	srv := valkeytest.Start(t)
	c := srv.Client(t)
	for _, inflight := range []int{0, 1, 4} {
		s, err := valkeystore.New(c, valkeystore.WithBatching(inflight))
		if err != nil {
			t.Fatal(err)
		}
		const limit, workers, each = 500, 64, 20 // 1280 requests
		l, _ := sluice.New(s, sluice.GCRA{Rate: 1, Per: time.Hour, Burst: limit},
			sluice.WithName("b"+strconv.Itoa(inflight)), sluice.WithTimeout(10*time.Second), sluice.WithDenyCache(false))
		l.Allow(context.Background(), "warm-up") // loads the script
		before := scriptCalls(t, c)
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					key := "hot"
					if i%2 == 0 {
						key = "k" + strconv.Itoa(w*each+i) // many keys too
					}
					res, err := l.Allow(context.Background(), key)
					if err != nil || res.Degraded {
						t.Errorf("%+v %v", res, err)
						return
					}
					if key == "hot" && res.Allowed {
						allowed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		calls := scriptCalls(t, c) - before
		t.Logf("batching %d: %d decisions in %d script calls", inflight, workers*each, calls)
		if n := allowed.Load(); n != limit {
			t.Errorf("batching %d: hot key allowed %d times, want %d", inflight, n, limit)
		}
		if inflight == 0 && calls != workers*each {
			t.Errorf("without batching: %d script calls for %d decisions", calls, workers*each)
		}
		if inflight > 0 && calls >= workers*each {
			t.Errorf("batching %d: %d script calls for %d decisions: nothing was merged", inflight, calls, workers*each)
		}
	}
}

// TestBatchingAbandoned checks that a caller whose context ends while it
// waits in the queue returns at once, and that the others are unaffected.
func TestBatchingAbandoned(t *testing.T) {
	srv := valkeytest.Start(t)
	c := srv.Client(t)
	s, err := valkeystore.New(c, valkeystore.WithBatching(1))
	if err != nil {
		t.Fatal(err)
	}
	l, _ := sluice.New(s, sluice.GCRA{Rate: 1, Per: time.Hour, Burst: 1000}, sluice.WithTimeout(5*time.Second))
	srv.Pause(t)
	// The first call occupies the only slot; the others queue behind it.
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			res, err := l.Allow(ctx, "k")
			if err == nil && !res.Degraded {
				t.Errorf("a normal decision from a paused server: %+v", res)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("returned after %v", d)
			}
		}()
	}
	wg.Wait()
	srv.Resume(t)
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := l.Allow(context.Background(), "k")
		if err == nil && !res.Degraded && res.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no normal decision after resume: %+v %v", res, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDenyCacheFlood floods one refused key on a real Valkey: the deny
// cache keeps all but a handful of the refusals off the server.
func TestDenyCacheFlood(t *testing.T) {
	srv := valkeytest.Start(t)
	c := srv.Client(t)
	s, err := valkeystore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := sluice.New(s, sluice.GCRA{Rate: 1, Per: time.Hour, Burst: 3}, sluice.WithTimeout(5*time.Second))
	ctx := context.Background()
	for range 3 {
		l.Allow(ctx, "flooded")
	}
	// The cache answers once the store's delete notices reach it (its
	// subscription is live), which on a loaded machine may come after the
	// first decisions: until then every refusal goes to the server. Wait
	// (up to 5s) for one refusal answered without a script call.
	for deadline := time.Now().Add(5 * time.Second); ; {
		n := scriptCalls(t, c)
		l.Allow(ctx, "flooded")
		if scriptCalls(t, c) == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no refusal answered by the deny cache within 5s: the store's subscription never became live")
		}
		time.Sleep(20 * time.Millisecond)
	}
	before := scriptCalls(t, c)
	var wg sync.WaitGroup
	var allowed atomic.Int64
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				if res, _ := l.Allow(ctx, "flooded"); res.Allowed {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	calls := scriptCalls(t, c) - before
	t.Logf("16,000 refused requests made %d script calls", calls)
	if allowed.Load() != 0 {
		t.Fatalf("%d requests allowed past the limit", allowed.Load())
	}
	// The first refusals race to the server before one of them fills the
	// cache: at most one per goroutine.
	if calls > 16 {
		t.Fatalf("16,000 refused requests made %d script calls, want at most 16", calls)
	}
}
