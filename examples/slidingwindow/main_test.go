package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// The table in docs/algorithms.md is the one this program prints (the rows;
// the parameters are in the sentence before it).
func TestDocTable(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../docs/algorithms.md")
	if err != nil {
		t.Fatal(err)
	}
	if window != time.Minute {
		t.Fatalf("docs/algorithms.md says the limit is per minute; it is per %v", window)
	}
	for _, says := range []string{fmt.Sprintf("limit (%d per minute)", limit), fmt.Sprintf("%d windows per row", windows)} {
		if !strings.Contains(strings.Join(strings.Fields(string(readme)), " "), says) {
			t.Errorf("docs/algorithms.md does not say %q", says)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if strings.HasPrefix(line, "|") && !strings.Contains(string(readme), line+"\n") {
			t.Errorf("docs/algorithms.md lacks the line %q of `go run ./examples/slidingwindow`:\n%s", line, out.String())
		}
	}
}

// On random bursts of random sizes, the counter never admits more than
// 2×Limit−1 in a span of one window, and the sliding log never more than
// Limit.
func TestBoundOnRandomTraffic(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	ctx := context.Background()
	for trial := range 100 {
		lim := 1 + r.Int64N(6)
		w := time.Duration(1+r.IntN(50)) * time.Millisecond
		var now time.Time
		opts := []sluice.Option{sluice.WithClock(func() time.Time { return now }), sluice.WithDenyCache(false)}
		counter, err := sluice.New(memstore.New(), sluice.SlidingWindow{Limit: lim, Window: w}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		exact, err := sluice.New(memstore.New(), sluice.SlidingLog{Limit: lim, Window: w}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		var cs, ls []time.Duration // admission times
		most := func(s []time.Duration, at time.Duration) int {
			n := 0
			for _, x := range s {
				if x > at-w {
					n++
				}
			}
			return n
		}
		at := time.Duration(0)
		for range 300 {
			// Mostly small steps, sometimes up to a window and a half.
			if r.IntN(4) == 0 {
				at += time.Duration(r.Int64N(int64(w)*3/2)) / time.Microsecond * time.Microsecond // the stores count microseconds
			} else {
				at += time.Duration(r.Int64N(int64(w)/10+1)) / time.Microsecond * time.Microsecond
			}
			now = sluiceEpoch.Add(at)
			for range 1 + r.IntN(int(2*lim)) {
				c, err := counter.Allow(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				l, err := exact.Allow(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				if c.Allowed {
					cs = append(cs, at)
				}
				if l.Allowed {
					ls = append(ls, at)
				}
			}
			if n := most(cs, at); n > int(2*lim-1) {
				t.Fatalf("trial %d (limit %d per %v): the counter admitted %d in the window ending at %v", trial, lim, w, n, at)
			}
			if n := most(ls, at); n > int(lim) {
				t.Fatalf("trial %d (limit %d per %v): the log admitted %d in the window ending at %v", trial, lim, w, n, at)
			}
		}
	}
}

var sluiceEpoch = time.Unix(1_800_000_000, 0)
