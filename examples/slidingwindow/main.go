// Command slidingwindow measures how often the sliding window counter
// (sluice.SlidingWindow) decides differently from an exact sliding log
// (sluice.SlidingLog) of the same limit, on generated traffic: Poisson
// arrivals at half, once and twice the limit's rate, and bursty on/off
// traffic. It runs on the in-process store under a fake clock, with fixed
// seeds, so every run prints the same table (the one in docs/algorithms.md).
//
//	go run ./examples/slidingwindow
//
// The table gives, per traffic:
//
//   - how often they decide differently when both see the same arrivals,
//     each deciding on its own state, and how many requests each admits;
//   - the share of the counter's admissions that an exact log of what the
//     counter itself admitted would have refused: admissions that took the
//     count of admissions in the trailing window (t-W, t] above Limit;
//   - the most requests each admitted in any span of one window (the log
//     never more than Limit; the counter at most 2×Limit−1).
package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// Limit and Window of both limiters, and how long each traffic runs.
const (
	limit   = 100
	window  = time.Minute
	windows = 200
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "slidingwindow:", err)
		os.Exit(1)
	}
}

// A traffic generates arrival times, as offsets from the start.
type traffic struct {
	name     string
	arrivals func(r *rand.Rand, horizon time.Duration) []time.Duration
}

// rate is the limit's own rate, in requests per microsecond.
const rate = float64(limit) / float64(window/time.Microsecond)

func traffics() []traffic {
	return []traffic{
		{"Poisson, 0.5× the limit", poisson(0.5)},
		{"Poisson, 1× the limit", poisson(1)},
		{"Poisson, 2× the limit", poisson(2)},
		{"bursts: 4× for 15s on average, then 45s off (1× overall)", onOff(4, window/4, 3*window/4)},
	}
}

// exp draws an exponential variate of the given mean (in µs) by inversion,
// so the sequence depends only on the PCG generator's stream.
func exp(r *rand.Rand, mean float64) float64 {
	u := float64(r.Uint64()>>11) / (1 << 53) // [0, 1)
	return -math.Log1p(-u) * mean
}

func poisson(times float64) func(*rand.Rand, time.Duration) []time.Duration {
	return func(r *rand.Rand, horizon time.Duration) []time.Duration {
		var out []time.Duration
		t := 0.0
		for {
			t += exp(r, 1/(times*rate))
			d := time.Duration(t) * time.Microsecond
			if d >= horizon {
				return out
			}
			out = append(out, d)
		}
	}
}

// onOff sends Poisson traffic at times× the limit's rate during on periods
// and nothing during off periods, both of exponential length.
func onOff(times float64, on, off time.Duration) func(*rand.Rand, time.Duration) []time.Duration {
	return func(r *rand.Rand, horizon time.Duration) []time.Duration {
		var out []time.Duration
		t := 0.0
		for {
			end := t + exp(r, float64(on/time.Microsecond))
			var done bool
			if out, done = onPeriod(r, out, t, end, times*rate, horizon); done {
				return out
			}
			t = end + exp(r, float64(off/time.Microsecond))
			if time.Duration(t)*time.Microsecond >= horizon {
				return out
			}
		}
	}
}

// onPeriod appends to out the arrivals of Poisson traffic at perMicro per
// microsecond from t to end (in microseconds), and reports done when an
// arrival reaches horizon.
func onPeriod(r *rand.Rand, out []time.Duration, t, end, perMicro float64, horizon time.Duration) (_ []time.Duration, done bool) {
	for {
		t += exp(r, 1/perMicro)
		if t >= end {
			return out, false
		}
		d := time.Duration(t) * time.Microsecond
		if d >= horizon {
			return out, true
		}
		out = append(out, d)
	}
}

// A row is the measurement of one traffic.
type row struct {
	name                      string
	requests                  int
	admitted, logAdmitted     int // by the counter, by the log
	counterOnly, logOnly      int // admitted by one and refused by the other
	over                      int // the counter's admissions above Limit in their trailing window
	mostInSpan, logMostInSpan int // most admitted in a span of one window
}

func measure(t traffic, seed uint64) (row, error) {
	arrivals := t.arrivals(rand.New(rand.NewPCG(seed, 0x5eed)), windows*window)
	epoch := time.Unix(1_800_000_000, 0)
	var now time.Time
	counter, exact, err := limiters(&now)
	if err != nil {
		return row{}, err
	}
	ctx := context.Background()
	m := tally{row: row{name: t.name, requests: len(arrivals)}}
	for _, at := range arrivals {
		now = epoch.Add(at)
		c, err := counter.Allow(ctx, "k")
		if err != nil {
			return row{}, err
		}
		l, err := exact.Allow(ctx, "k")
		if err != nil {
			return row{}, err
		}
		m.record(at, c.Allowed, l.Allowed)
	}
	m.mostInSpan, m.logMostInSpan = m.counterSpan.most, m.logSpan.most
	return m.row, nil
}

// limiters are the sliding-window counter and the sliding log compared,
// both reading the clock *now.
func limiters(now *time.Time) (counter, exact *sluice.Limiter, err error) {
	opts := []sluice.Option{sluice.WithClock(func() time.Time { return *now }), sluice.WithDenyCache(false)}
	counter, err = sluice.New(memstore.New(), sluice.SlidingWindow{Limit: limit, Window: window}, opts...)
	if err != nil {
		return nil, nil, err
	}
	exact, err = sluice.New(memstore.New(), sluice.SlidingLog{Limit: limit, Window: window}, opts...)
	return counter, exact, err
}

// tally is a measurement under way: the row, and each limiter's
// admissions in the trailing window.
type tally struct {
	row
	counterSpan, logSpan span
}

// record counts one arrival at t and what the counter and the log
// decided of it.
func (m *tally) record(t time.Duration, counter, log bool) {
	m.compare(counter, log)
	if counter {
		m.admitted++
		if m.counterSpan.count(t) >= limit {
			m.over++
		}
		m.counterSpan.add(t)
	}
	if log {
		m.logAdmitted++
		m.logSpan.add(t)
	}
}

// compare counts a request that one of the two admitted and the other
// refused.
func (r *row) compare(counter, log bool) {
	switch {
	case counter && !log:
		r.counterOnly++
	case !counter && log:
		r.logOnly++
	}
}

// span counts admissions in the trailing window (t-W, t], kept plainly as
// the list of admission times in it.
type span struct {
	times []time.Duration
	most  int
}

// count returns the number of admissions in (t-W, t], forgetting older
// ones.
func (s *span) count(t time.Duration) int {
	i := 0
	for i < len(s.times) && s.times[i] <= t-window {
		i++
	}
	s.times = s.times[i:]
	return len(s.times)
}

// add records an admission at t, no earlier than the last.
func (s *span) add(t time.Duration) {
	s.count(t)
	s.times = append(s.times, t)
	s.most = max(s.most, len(s.times))
}

func pct(n, of int) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f%%", 100*float64(n)/float64(of))
}

func run(w io.Writer) error {
	fmt.Fprintf(w, "Limit %d per %v; %d windows of traffic each; in-process store, fake clock, fixed seeds.\n\n", limit, window, windows)
	fmt.Fprintln(w, "| traffic | requests | counter admits, log refuses | counter refuses, log admits | admitted: log, counter | counter's admissions over the limit | most admitted in one window: log, counter |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for i, t := range traffics() {
		r, err := measure(t, uint64(i+1))
		if err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		if r.logMostInSpan > limit || r.mostInSpan > 2*limit-1 {
			return fmt.Errorf("%s: %d and %d admitted in one window: a bound is broken", t.name, r.logMostInSpan, r.mostInSpan)
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %d, %d | %s | %d, %d |\n", r.name, r.requests,
			pct(r.counterOnly, r.requests), pct(r.logOnly, r.requests), r.logAdmitted, r.admitted,
			pct(r.over, r.admitted), r.logMostInSpan, r.mostInSpan)
	}
	return nil
}
