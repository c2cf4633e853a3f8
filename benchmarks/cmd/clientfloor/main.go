// Command clientfloor measures the floor of a Go client's CPU per
// decision, side by side with Sluice and its peers, in one run on one
// Valkey: goroutines each blocking on one decision at a time, with
//
//   - floor-runtime: callers hand their decisions to workers (the calls in
//     flight) through a channel; a worker takes what is waiting, up to a
//     call's worth, and answers all at once as if Valkey had answered
//     instantly. No network: the Go runtime's cost of parking and waking
//     each caller.
//   - floor-valkey-go/<algorithm>: the same workers, each batch one
//     EVALSHA of Sluice's script through valkey-go, arguments built and
//     reply decoded by luascript as valkeystore does; no
//     deadline, breaker or metrics. The cheapest client of Sluice's
//     design on valkey-go.
//   - floor-raw/<algorithm>: the same without a client library: each
//     worker writes its EVALSHA as RESP on a connection of its own and
//     reads the reply on its own goroutine (valkey-go's writer and reader
//     goroutines are gone), as valkey-benchmark's connections do.
//   - any target of cmd/compare (sluice/gcra, valkeylimiter, ...).
//
// Each run reports decisions/s, the process's CPU time (getrusage) and
// the server's (INFO cpu) per decision, allocations per decision, the
// EVALSHA calls the server counted per decision, and p50/p99; the targets
// alternate over rounds and the report ends with each target's medians.
// The floors' own counts of decisions and calls are checked against the
// harness's and the server's after every run: a mismatch is an error.
//
//	clientfloor -conc 128 -keys 100000 -duration 3s -rounds 3
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run parses args, measures and writes the report to stdout: exit code 0,
// 2 for bad arguments, 1 for a failed measurement.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "clientfloor:", err)
		return 2
	}
	if o == nil { // -h
		return 0
	}
	if err := measure(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "clientfloor:", err)
		return 1
	}
	return 0
}
