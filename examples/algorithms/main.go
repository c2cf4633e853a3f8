// Command algorithms shows Sluice's five algorithms side by side on the same
// traffic: a full burst just before the edge of a one-second window and
// another just after it, then a steady trickle. It uses the in-process store,
// or a real Valkey when VALKEY_ADDR is set (several comma-separated
// addresses mean a cluster).
//
//	go run ./examples/algorithms
//	VALKEY_ADDR=127.0.0.1:6379 go run ./examples/algorithms
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/valkeystore"
)

func main() {
	if err := run(os.Stdout, os.Getenv("VALKEY_ADDR")); err != nil {
		fmt.Fprintln(os.Stderr, "algorithms:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, addr string) error {
	store, where, closeStore, err := openStore(addr)
	if err != nil {
		return err
	}
	defer closeStore()
	fmt.Fprintf(w, "Ten requests 10ms before a window edge, ten 10ms after, then one every 50ms for a second.\nLimit: 10 per second. Store: %s.\n\n", where)
	fmt.Fprintf(w, "%-16s %8s %8s %9s  %s\n", "algorithm", "before", "after", "trickle", "first refusal after the edge")

	// The prefix keeps this run's keys apart from any other's.
	prefix := fmt.Sprintf("example:%d", time.Now().UnixNano())
	for _, p := range []sluice.Policy{
		sluice.FixedWindow{Limit: 10, Window: time.Second},
		sluice.SlidingLog{Limit: 10, Window: time.Second},
		sluice.SlidingWindow{Limit: 10, Window: time.Second},
		sluice.TokenBucket{Capacity: 10, Rate: 10, Per: time.Second},
		sluice.GCRA{Rate: 10, Per: time.Second, Burst: 10},
	} {
		line, err := edgeAndTrickle(store, p, prefix)
		if err != nil {
			return err
		}
		fmt.Fprintln(w, line)
	}
	return nil
}

// openStore is the in-process store, or the Valkey at addr once it
// answers.
func openStore(addr string) (store driver.Store, where string, closeStore func(), err error) {
	if addr == "" {
		return memstore.New(), "the in-process store", func() {}, nil
	}
	lazy, err := valkeystore.Connect(valkey.ClientOption{InitAddress: strings.Split(addr, ",")},
		valkeystore.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, "", nil, err
	}
	// This run compares the algorithms, so it waits for Valkey rather
	// than showing fail-open decisions (a service would not wait: see
	// examples/httpservice).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := lazy.Wait(ctx); err != nil {
		lazy.Close()
		return nil, "", nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	return lazy, "Valkey at " + addr, func() { lazy.Close() }, nil
}

// edgeAndTrickle runs the traffic on policy p and returns its line of the
// table: what each phase allowed, and the first refusal after the edge.
// A fake clock makes the run exact and repeatable.
func edgeAndTrickle(store driver.Store, p sluice.Policy, prefix string) (string, error) {
	tr := &trafficRun{}
	epoch := time.Unix(1_800_000_000, 0)
	l, err := sluice.New(store, p, sluice.WithPrefix(prefix), sluice.WithClock(func() time.Time { return tr.now }))
	if err != nil {
		return "", err
	}
	tr.l = l
	ctx := context.Background()
	tr.now = epoch.Add(990 * time.Millisecond)
	before, err := tr.burst(ctx, 10)
	if err != nil {
		return "", err
	}
	tr.refusal = sluice.Result{}
	tr.now = epoch.Add(1010 * time.Millisecond)
	after, err := tr.burst(ctx, 10)
	if err != nil {
		return "", err
	}
	first := tr.refusal
	trickle, err := tr.trickle(ctx, epoch.Add(1010*time.Millisecond))
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%-16s %5d/10 %5d/10 %6d/20  %s", l.Rule().Algorithm, before, after, trickle, refusalNote(first)), nil
}

// trafficRun is one run of edgeAndTrickle: the limiter, the fake clock it
// reads, and the first refusal since the phase began.
type trafficRun struct {
	l       *sluice.Limiter
	now     time.Time
	refusal sluice.Result
}

// burst sends n requests at the current time and returns how many were
// allowed, keeping the first refusal.
func (tr *trafficRun) burst(ctx context.Context, n int) (allowed int, err error) {
	for range n {
		res, err := tr.l.Allow(ctx, "client-1")
		if err != nil {
			return 0, err
		}
		if res.Degraded {
			return 0, fmt.Errorf("store unavailable")
		}
		if res.Allowed {
			allowed++
		} else if tr.refusal.RetryAfter == 0 {
			tr.refusal = res
		}
	}
	return allowed, nil
}

// trickle sends one request every 50ms for a second after start and
// returns how many were allowed.
func (tr *trafficRun) trickle(ctx context.Context, start time.Time) (int, error) {
	allowed := 0
	for i := range 20 {
		tr.now = start.Add(time.Duration(i+1) * 50 * time.Millisecond)
		n, err := tr.burst(ctx, 1)
		if err != nil {
			return 0, err
		}
		allowed += n
	}
	return allowed, nil
}

// refusalNote describes the first refusal after the edge, or says there
// was none.
func refusalNote(first sluice.Result) string {
	if first.RetryAfter > 0 {
		return fmt.Sprintf("retry after %v, fully reset after %v", first.RetryAfter, first.ResetAfter)
	}
	return "none"
}
