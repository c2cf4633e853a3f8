package main

import (
	"context"
	"fmt"
	"io"
)

const usage = `usage: sluice <command> [flags]

commands:
  serve             answer rate-limit decisions over HTTP JSON and Envoy gRPC
  validate-config   check configuration files and exit non-zero on errors
  bench             load a Valkey or Valkey Cluster with decisions

Run "sluice <command> -h" for a command's flags.
`

// run is the whole program: main only calls it, so tests can too. env looks
// up environment variables. It returns the exit code.
func run(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return runServe(ctx, rest, env, stdout, stderr)
	case "validate-config":
		return runValidate(ctx, rest, stdout, stderr)
	case "bench":
		return runBench(ctx, rest, stdout, stderr)
	// A further command is one more case here.
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", cmd, usage)
	return 2
}
