package verify

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// The worker side of the in_flight checks.

// refusedPause is how long a holder waits after a refusal before it tries
// again: short, so that a freed slot is soon taken.
const refusedPause = time.Millisecond

// hold runs a "hold" job: j.Goroutines holders each take a lease of j's
// key, hold it for a random time between a quarter of j.HoldMicro and
// j.HoldMicro, release it, and start again, until j.RunMicro has passed.
// Each lease held is a span in the tally.
func hold(ctx context.Context, l *sluice.Limiter, j job) tally {
	var t tally
	var mu sync.Mutex
	var wg sync.WaitGroup
	end := time.Now().Add(time.Duration(j.RunMicro) * time.Microsecond)
	longest := time.Duration(j.HoldMicro) * time.Microsecond
	for g := range max(j.Goroutines, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := holder(ctx, l, j.Identity, end, longest, rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(g))))
			mu.Lock()
			t.merge(mine)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return t
}

// holder is one goroutine of a "hold" job, until end.
func holder(ctx context.Context, l *sluice.Limiter, key string, end time.Time, longest time.Duration, rng *rand.Rand) tally {
	var t tally
	for time.Now().Before(end) {
		ls, res, err := l.Acquire(ctx, key)
		if err != nil || res.Degraded {
			t.count(res, err)
			return t
		}
		if ls == nil {
			t.Refused++
			time.Sleep(refusedPause)
			continue
		}
		from := time.Now()
		time.Sleep(longest/4 + time.Duration(rng.Int64N(int64(longest-longest/4)+1)))
		to := time.Now()
		t.Allowed++
		t.Spans = append(t.Spans, [2]int64{from.UnixNano(), to.UnixNano()})
		freed, err := ls.Release(ctx)
		if err != nil {
			t.count(res, err)
			return t
		}
		if !freed {
			t.Lost++
		}
	}
	return t
}

// take runs a "take" job: it takes j.Attempts leases of j's key from
// j.Goroutines goroutines and keeps them, noting when the first acquire
// was sent and the last returned.
func take(ctx context.Context, l *sluice.Limiter, j job) tally {
	var t tally
	var left atomic.Int64
	left.Store(j.Attempts)
	var mu sync.Mutex
	var wg sync.WaitGroup
	t.SentNano = time.Now().UnixNano()
	for range max(min(j.Goroutines, int(j.Attempts)), 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine tally
			for left.Add(-1) >= 0 {
				_, res, err := l.Acquire(ctx, j.Identity)
				mine.count(res, err)
			}
			mu.Lock()
			t.merge(mine)
			mu.Unlock()
		}()
	}
	wg.Wait()
	t.HeldNano = time.Now().UnixNano()
	return t
}
