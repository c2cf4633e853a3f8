package benchmarks

import (
	"context"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// MakeKeys returns n distinct identities, "u0" to "u<n-1>", built before
// any timing so that no run allocates or formats a key.
func MakeKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "u" + strconv.Itoa(i)
	}
	return keys
}

// Load is one timed run: Concurrency goroutines call the Decider in a loop
// for Duration, each picking a uniformly random key of Keys (one key: a hot
// key).
type Load struct {
	Concurrency int
	Duration    time.Duration
	Keys        []string
}

// Stats is what a run measured.
type Stats struct {
	Decisions int64 // all calls that returned, errors included
	Allowed   int64
	Denied    int64
	Degraded  int64
	Errors    int64
	FirstErr  error
	Elapsed   time.Duration
	Latency   Histogram
}

// Rate is decisions (errors and degraded decisions excluded) per second.
func (s *Stats) Rate() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Allowed+s.Denied) / s.Elapsed.Seconds()
}

// Run runs l against d and returns what it measured. Every call's latency
// is recorded, errors' included.
func Run(ctx context.Context, d Decider, l Load) *Stats {
	if l.Concurrency < 1 {
		l.Concurrency = 1
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	workers := make([]*Stats, l.Concurrency)
	start := time.Now()
	for w := range workers {
		st := &Stats{}
		workers[w] = st
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 0x5eed))
			n := len(l.Keys)
			for !stop.Load() {
				key := l.Keys[0]
				if n > 1 {
					key = l.Keys[rng.IntN(n)]
				}
				t0 := time.Now()
				out, err := d.Allow(ctx, key)
				st.Latency.Record(time.Since(t0))
				st.Decisions++
				switch {
				case err != nil:
					st.Errors++
					if st.FirstErr == nil {
						st.FirstErr = err
					}
				case out == Allowed:
					st.Allowed++
				case out == Denied:
					st.Denied++
				default:
					st.Degraded++
				}
			}
		}(uint64(w) + 1)
	}
	timer := time.NewTimer(l.Duration)
	select {
	case <-timer.C:
	case <-ctx.Done():
		timer.Stop()
	}
	stop.Store(true)
	wg.Wait()
	total := &Stats{Elapsed: time.Since(start)}
	for _, st := range workers {
		total.add(st)
	}
	return total
}

func (s *Stats) add(o *Stats) {
	s.Decisions += o.Decisions
	s.Allowed += o.Allowed
	s.Denied += o.Denied
	s.Degraded += o.Degraded
	s.Errors += o.Errors
	if s.FirstErr == nil {
		s.FirstErr = o.FirstErr
	}
	s.Latency.Merge(&o.Latency)
}

// Prepare makes one decision for every key, with concurrency goroutines,
// so that the timed runs find their state in Valkey. It returns how many
// were allowed, and the first error.
func Prepare(ctx context.Context, d Decider, keys []string, concurrency int) (allowed int64, err error) {
	var next atomic.Int64
	var ok atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for w := 0; w < concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(keys)) || ctx.Err() != nil {
					return
				}
				out, e := d.Allow(ctx, keys[i])
				if e != nil {
					once.Do(func() { first = fmt.Errorf("key %s: %w", keys[i], e) })
					continue
				}
				if out == Allowed {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return ok.Load(), first
}

// Histogram records durations in log-linear buckets: exact below 64ns,
// then 32 buckets per power of two (at most 3% error). The zero value is
// ready; it is not safe for concurrent use (one per goroutine, merged).
type Histogram struct {
	counts [64 * histSub]uint64
	n      uint64
	max    time.Duration
}

const (
	histSubBits = 5
	histSub     = 1 << histSubBits
)

func histBucket(v uint64) int {
	if v < 2*histSub {
		return int(v)
	}
	e := bits.Len64(v) - histSubBits - 1
	return (e+1)*histSub + int(v>>e) - histSub
}

// histValue is the middle of bucket i.
func histValue(i int) time.Duration {
	if i < 2*histSub {
		return time.Duration(i)
	}
	e := i/histSub - 1
	m := uint64(i%histSub + histSub)
	lo := m << e
	return time.Duration(lo + (uint64(1)<<e)/2)
}

// Record adds one duration.
func (h *Histogram) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[histBucket(uint64(d))]++
	h.n++
	if d > h.max {
		h.max = d
	}
}

// Merge adds o's counts to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// Count is the number of durations recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Quantile returns the duration below which a fraction q of the recorded
// ones fall (q = 0.99 for p99), to the bucket's precision.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(histValue(i), h.max)
		}
	}
	return h.max
}
