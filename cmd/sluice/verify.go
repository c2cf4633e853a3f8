package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/verify"
)

const verifyUsage = `usage: sluice verify [--config FILE] [--valkey ADDR[,ADDR...]] [--policy NAME ...] [--processes N] [--json]

Proves that this deployment limits as promised: against its own Valkey
(standalone or Cluster) and for each of its policies, it runs

  concurrency  twice the limit in parallel from N processes (this binary,
               started again) with many goroutines each: exactly the limit
               must be allowed
  boundaries   a full burst just before and just after a window edge: fixed
               window allows both, sliding log neither, sliding window per
               its formula, the buckets what refilled
  recovery     after exhausting a key, a request at the advertised
               RetryAfter is allowed and one 1µs earlier is not; short
               RetryAfters are also waited out in real time
  failure      the policy against a local server that never answers and one
               where nothing listens: each decision within the policy's
               timeout (and the black-hole wait), as on_failure says
  ttl          every key written expires, within its bound

An in_flight policy gets its own concurrency check (holders in N processes
hold leases for random times: never more than the limit at once by their
own clocks, freed slots soon taken again), a crash check (a process
holding every slot is killed with SIGKILL: refused until its leases end,
admitted again within --margin; a Lease over --lease-wait is checked with
that one), and failure and ttl as above. And, once, doctor's checks of the Valkey settings that lose counts: an
evicting maxmemory-policy fails (an evicted key starts again with its full
limit); persistence that forgets long windows on a restart is named as a
caveat of the verdict; settings the server does not let verify read (CONFIG
disabled) are named as not checked. The checks run
in a scratch key prefix of its own (refused if it already holds keys),
deleted at the end. Exit code 0 when every check passes, 1 when one fails
(the failed checks are named), 2 for bad usage.

flags:
`

func runVerify(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) int {
	fs := newFlags("verify")
	of := addOpsFlags(fs)
	var policies stringList
	fs.Var(&policies, "policy", "verify only this `policy` (repeat for several; default: all)")
	processes := fs.Int("processes", verify.DefaultProcesses, "worker `processes` of the concurrency check")
	goroutines := fs.Int("goroutines", verify.DefaultGoroutines, "goroutines deciding in each worker process")
	prefix := fs.String("prefix", "", "scratch key `prefix` (default: sluice-verify- and 8 random hex digits); must hold no keys")
	wait := fs.Duration("blackhole-wait", verify.DefaultBlackholeWait, "longest a decision may take against a server that never answers")
	margin := fs.Duration("margin", verify.DefaultMargin, "what a degraded decision may take beyond the policy's timeout, and a crashed lease holder's slot beyond its Lease")
	leaseWait := fs.Duration("lease-wait", verify.DefaultLeaseWait, "longest Lease of an in_flight policy the crash check waits out (a longer one is checked with this one)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if code, ok := parseNoArgs(fs, verifyUsage, args, stdout, stderr); !ok {
		return code
	}
	if msg := verifyCountsProblem(*processes, *goroutines, *wait, *margin, *leaseWait); msg != "" {
		return usageError(fs, stderr, "%s", msg)
	}
	cfg, err := of.load(true)
	if err != nil {
		fmt.Fprintf(stderr, "sluice verify: %v\n", err)
		return 1
	}
	rep, err := verify.Run(ctx, verify.Options{
		Config: cfg, Env: env, Policies: policies, Processes: *processes, Goroutines: *goroutines,
		Prefix: *prefix, BlackholeWait: *wait, Margin: *margin, LeaseWait: *leaseWait,
	})
	if err != nil && rep == nil {
		fmt.Fprintf(stderr, "sluice verify: %v\n", err)
		return verifyErrorCode(err)
	}
	writeOutput(stdout, rep, *asJSON, (*verify.Report).WriteText)
	return verifyVerdict(rep, err, stderr)
}

// verifyCountsProblem says what is wrong with verify's counts and
// durations, "" when nothing is.
func verifyCountsProblem(processes, goroutines int, wait, margin, leaseWait time.Duration) string {
	switch {
	case processes < 1 || goroutines < 1:
		return "--processes and --goroutines must be at least 1"
	case wait <= 0 || margin <= 0 || leaseWait <= 0:
		return "--blackhole-wait, --margin and --lease-wait must be positive"
	}
	return ""
}

// verifyErrorCode is the exit code of a run that made no report: 2 for
// an unknown policy, else 1.
func verifyErrorCode(err error) int {
	if errors.Is(err, verify.ErrUnknownPolicy) {
		return 2
	}
	return 1
}

// verifyVerdict is the exit code of a run that made report rep (err: it
// stopped early): 1, naming the failed checks, unless every check passed.
func verifyVerdict(rep *verify.Report, err error, stderr io.Writer) int {
	if err != nil {
		fmt.Fprintf(stderr, "sluice verify: %v\n", err)
		return 1
	}
	if !rep.Passed {
		fmt.Fprintf(stderr, "sluice verify: FAIL: %s\n", strings.Join(rep.Failed, ", "))
		return 1
	}
	return 0
}

// verifyWorker is what this binary does when sluice verify starts it as a
// worker process.
func verifyWorker(ctx context.Context, stdout, stderr io.Writer) int {
	if err := verify.ServeWorker(ctx, os.Stdin, stdout); err != nil {
		fmt.Fprintf(stderr, "sluice verify worker: %v\n", err)
		return 1
	}
	return 0
}
