package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/sluicehq/sluice/cmd/sluice/internal/verify"
)

// A command is one "sluice <name>". Its run function gets the arguments
// after the name and returns the exit code: 0 success, 1 failure (something
// checked was wrong, or could not be done), 2 bad usage. Every command
// parses its flags with parseFlags, so -h behaves the same everywhere.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) int
}

// commands lists every command, in the order usage shows them. A further
// command is one more entry here.
func commands() []command {
	return []command{
		{"serve", "answer rate-limit decisions over HTTP JSON and Envoy gRPC", runServe},
		{"validate-config", "check configuration files and exit non-zero on errors", runValidate},
		{"bench", "load a Valkey or Valkey Cluster with decisions", withoutEnv(runBench)},
		{"verify", "prove this deployment limits as promised, against its own Valkey", runVerify},
		{"doctor", "check what makes limits wrong or fragile in this deployment's Valkey", runDoctor},
		{"key", "print the key Sluice counts a raw address, API key or username under", runKey},
		{"keys", "count the keys of each policy, their memory and TTL spread (SCAN)", runKeys},
		{"inspect", "show a key's state as its algorithm sees it", runInspect},
		{"reset", "forget a key's state (audit-logged)", runReset},
		{"override", "set, get, list or remove a key's override of its limit", runOverride},
		{"explain", "show which Envoy descriptor entry matches a request, and why", runExplain},
		{"version", "print the version and the revision this binary was built from", withoutEnv(runVersion)},
		{"simulate", "draw what policies decide on simulated traffic; replay a decision log", withoutEnv(runSimulate)},
	}
}

func withoutEnv(f func(context.Context, []string, io.Writer, io.Writer) int) func(context.Context, []string, func(string) (string, bool), io.Writer, io.Writer) int {
	return func(ctx context.Context, args []string, _ func(string) (string, bool), stdout, stderr io.Writer) int {
		return f(ctx, args, stdout, stderr)
	}
}

// usage is the top-level help.
func usage() string {
	var b strings.Builder
	b.WriteString("usage: sluice <command> [flags]\n\ncommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %-17s %s\n", c.name, c.summary)
	}
	b.WriteString("\nRun \"sluice <command> -h\" for a command's flags; \"sluice --version\" for the version.\n")
	return b.String()
}

// run is the whole program: main only calls it, so tests can too. env looks
// up environment variables. It returns the exit code.
func run(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) int {
	if v, _ := env(verify.WorkerEnv); v == "1" {
		return verifyWorker(ctx, stdout, stderr)
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return 2
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage())
		return 0
	case "-version", "--version":
		name = "version"
	}
	if c, ok := findCommand(name); ok {
		return c.run(ctx, rest, env, stdout, stderr)
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", name, usage())
	return 2
}

// findCommand returns the command called name.
func findCommand(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}
