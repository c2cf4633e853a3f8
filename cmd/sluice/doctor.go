package main

import (
	"context"
	"fmt"
	"io"

	"github.com/sluicehq/sluice/cmd/sluice/internal/doctor"
)

const doctorUsage = `usage: sluice doctor [--config FILE] [--valkey ADDR[,ADDR...]] [--json]

Checks what makes this deployment's limits wrong or fragile in its Valkey:
server version; maxmemory-policy (any allkeys-* or volatile-* policy can
evict limiter keys); persistence for policies with windows of an hour or
more; cluster state, slot coverage and replicas per primary; replication
lag; min-replicas-to-write; decision round-trip p50/p99 against each
policy's timeout; clock skew between this host and each server; that the
scripts load and decide; ACL permissions. Each finding has a severity
(error, warning, could not check, info, ok) and the setting that fixes it.
Where CONFIG is disabled (managed services) it says "could not check".

Exit code 0 when nothing is worse than info or "could not check", 1 when
there is a warning or an error, 2 for bad usage.

flags:
`

func runDoctor(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) int {
	fs := newFlags("doctor")
	of := addOpsFlags(fs)
	samples := fs.Int("samples", 200, "decisions timed for the latency check")
	asJSON := fs.Bool("json", false, "print the findings as JSON")
	if code, ok := parseNoArgs(fs, doctorUsage, args, stdout, stderr); !ok {
		return code
	}
	if *samples < 1 {
		return usageError(fs, stderr, "--samples must be at least 1")
	}
	cfg, err := of.load(true)
	if err != nil {
		fmt.Fprintf(stderr, "sluice doctor: %v\n", err)
		return 1
	}
	rep, err := doctor.Run(ctx, doctor.Options{Config: cfg, Env: env, Samples: *samples})
	if err != nil {
		fmt.Fprintf(stderr, "sluice doctor: %v\n", err)
		return 1
	}
	writeOutput(stdout, rep, *asJSON, (*doctor.Report).WriteText)
	if rep.Worst >= doctor.Warning {
		return 1
	}
	return 0
}
