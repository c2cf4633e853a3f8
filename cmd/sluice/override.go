package main

import (
	"context"
	"fmt"
	"io"
	"os/user"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/server"
)

// sluice override set|get|list|rm: key overrides in the deployment's
// Valkey, as PUT/GET/DELETE /v1/overrides does through sluice serve.

const overrideUsage = `usage: sluice override set [flags] --limit N (--expires TIME | --for DURATION) POLICY KEY
       sluice override get [flags] POLICY KEY
       sluice override list [flags] POLICY
       sluice override rm [flags] POLICY KEY

Sets, shows, lists or removes the override of one key of a policy: its limit
(and optionally --window or --rate) until an expiry, with a reason and an
actor for audit. The policy must say overrides: true in the configuration.
Every process of sluice serve sees an override at once, and it lapses by
itself at its expiry. KEY is the key as counted (sluice key prints it).
get --json prints one object, list --json an array, in the form of
GET /v1/overrides (windows and rates as text). Exit code 1 when get or rm
finds no override (rm then removes nothing), 2 for bad input.

flags:
`

// runOverride is sluice override set|get|list|rm. Exit code 0 on success,
// 1 when the store fails or get or rm finds no override, 2 for bad input.
func runOverride(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) int {
	if code, done := subcommandHelp(args, overrideUsage, stdout, stderr); done {
		return code
	}
	c, code := parseOverrideArgs(args, stdout, stderr)
	if c == nil {
		return code
	}
	k, err := openKeyEnv(ctx, c.ops, env)
	if err != nil {
		fmt.Fprintf(stderr, "sluice override: %v\n", err)
		return 1
	}
	defer k.Close()
	p, l, code := overridePolicy(k, c.policy, stderr)
	if l == nil {
		return code
	}
	ov := &overrideRun{l: l, policy: p.Name, key: c.key, stdout: stdout, stderr: stderr}
	return ov.run(ctx, c)
}

// subcommandHelp handles a command made of subcommands before its flags
// are parsed: without arguments it prints usage on stderr (exit code 2),
// with -h, -help or --help first on stdout (exit code 0). done is false
// when the command is to run.
func subcommandHelp(args []string, usage string, stdout, stderr io.Writer) (code int, done bool) {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2, true
	}
	switch args[0] {
	case "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return 0, true
	}
	return 0, false
}

// overrideCommand is a parsed sluice override command line.
type overrideCommand struct {
	verb        string
	ops         *opsFlags
	policy, key string
	o           sluice.Override // set's
	asJSON      bool
}

// parseOverrideArgs parses the subcommand, its flags and its arguments;
// nil and an exit code when the command should stop.
func parseOverrideArgs(args []string, stdout, stderr io.Writer) (*overrideCommand, int) {
	verb := args[0]
	want := map[string]int{"set": 2, "get": 2, "rm": 2, "list": 1}[verb]
	if want == 0 {
		return nil, usageError(newFlags("override"), stderr, "unknown subcommand %q (want set, get, list or rm)", verb)
	}
	fs := newFlags("override " + verb)
	c := &overrideCommand{verb: verb, ops: addOpsFlags(fs)}
	limit := fs.Int64("limit", 0, "set: the key's `limit` (limit, capacity or burst)")
	expires := fs.String("expires", "", "set: when the override lapses, RFC 3339 (`2030-01-31T00:00:00Z`)")
	forD := fs.String("for", "", "set: lapse after this `duration` from now (72h, 7d) instead of --expires")
	window := fs.String("window", "", "set: another `window` (window algorithms)")
	rate := fs.String("rate", "", "set: another `rate` such as 50/s (token_bucket, gcra)")
	reason := fs.String("reason", "", "set: why, for audit")
	actor := fs.String("actor", "", "set: who (default: the operating-system user)")
	fs.BoolVar(&c.asJSON, "json", false, "get, list: JSON output")
	if code, ok := parseFlags(fs, overrideUsage, args[1:], stdout, stderr); !ok {
		return nil, code
	}
	if fs.NArg() != want {
		return nil, usageError(fs, stderr, "want %d arguments (POLICY%s), got %d", want, map[int]string{1: "", 2: " KEY"}[want], fs.NArg())
	}
	if verb == "set" {
		var err error
		if c.o, err = overrideFlags(*limit, *expires, *forD, *window, *rate, *reason, *actor); err != nil {
			return nil, usageError(fs, stderr, "%v", err)
		}
	}
	c.policy, c.key = fs.Arg(0), fs.Arg(1)
	return c, 0
}

// overridePolicy returns the named policy and its limiter, or a nil
// limiter and the exit code when the policy is unknown or reads no
// overrides.
func overridePolicy(k *keyEnv, name string, stderr io.Writer) (*config.Policy, *sluice.Limiter, int) {
	p, err := k.policy(name)
	if err != nil {
		fmt.Fprintf(stderr, "sluice override: %v\n", err)
		return nil, nil, 2
	}
	if !p.Overrides {
		fmt.Fprintf(stderr, "sluice override: policy %q does not read key overrides: set overrides: true in %s first\n", p.Name, k.cfg.Source)
		return nil, nil, 2
	}
	l, err := k.limiter(p)
	if err != nil {
		fmt.Fprintf(stderr, "sluice override: %v\n", err)
		return nil, nil, 1
	}
	return p, l, 0
}

// overrideRun is one subcommand on one policy's limiter and key.
type overrideRun struct {
	l              *sluice.Limiter
	policy, key    string
	stdout, stderr io.Writer
}

// run runs c's subcommand and returns its exit code.
func (r *overrideRun) run(ctx context.Context, c *overrideCommand) int {
	switch c.verb {
	case "set":
		return r.set(ctx, c.o)
	case "get":
		return r.get(ctx, c.asJSON)
	case "list":
		return r.list(ctx, c.asJSON)
	default: // "rm"
		return r.rm(ctx)
	}
}

func (r *overrideRun) set(ctx context.Context, o sluice.Override) int {
	if err := r.l.SetOverride(ctx, r.key, o); err != nil {
		fmt.Fprintf(r.stderr, "sluice override set: %v\n", err)
		return 2
	}
	fmt.Fprintf(r.stdout, "%s %s: limit %d until %s\n", r.policy, r.key, o.Limit, o.Expires.UTC().Format(time.RFC3339))
	return 0
}

func (r *overrideRun) get(ctx context.Context, asJSON bool) int {
	got, ok, err := r.l.GetOverride(ctx, r.key)
	if err != nil {
		fmt.Fprintf(r.stderr, "sluice override get: %v\n", err)
		return 1
	}
	if !ok {
		fmt.Fprintf(r.stderr, "sluice override get: %s %s has no override\n", r.policy, r.key)
		return 1
	}
	if asJSON {
		// One override: one object, as GET /v1/overrides/POLICY/KEY answers.
		writeJSON(r.stdout, server.ToOverrideJSON(r.policy, r.key, got))
		return 0
	}
	printOverrides(r.stdout, r.policy, false, []sluice.KeyOverride{{Key: r.key, Override: got}})
	return 0
}

func (r *overrideRun) list(ctx context.Context, asJSON bool) int {
	list, err := r.l.Overrides(ctx)
	printOverrides(r.stdout, r.policy, asJSON, list)
	if err != nil {
		fmt.Fprintf(r.stderr, "sluice override list: %v\n", err)
		return 1
	}
	return 0
}

func (r *overrideRun) rm(ctx context.Context) int {
	_, ok, err := r.l.GetOverride(ctx, r.key)
	if err != nil {
		fmt.Fprintf(r.stderr, "sluice override rm: %v\n", err)
		return 1
	}
	if !ok {
		fmt.Fprintf(r.stderr, "sluice override rm: %s %s has no override (never set, lapsed or removed already): nothing removed\n", r.policy, r.key)
		return 1
	}
	if err := r.l.DeleteOverride(ctx, r.key); err != nil {
		fmt.Fprintf(r.stderr, "sluice override rm: %v\n", err)
		return 1
	}
	fmt.Fprintf(r.stdout, "%s %s: override removed\n", r.policy, r.key)
	return 0
}

// overrideFlags builds the override the set flags describe.
func overrideFlags(limit int64, expires, forD, window, rate, reason, actor string) (sluice.Override, error) {
	o := sluice.Override{Limit: limit, Reason: reason, Actor: actor}
	if limit <= 0 {
		return o, fmt.Errorf("--limit is missing or not positive")
	}
	var err error
	if o.Expires, err = overrideExpiry(expires, forD); err != nil {
		return o, err
	}
	if err := overrideParams(&o, window, rate); err != nil {
		return o, err
	}
	if o.Actor == "" {
		o.Actor = currentUser()
	}
	return o, nil
}

// overrideExpiry is when an override lapses, from exactly one of
// --expires (an RFC 3339 time) and --for (a positive duration from now).
func overrideExpiry(expires, forD string) (time.Time, error) {
	switch {
	case expires != "" && forD != "":
		return time.Time{}, fmt.Errorf("give --expires or --for, not both")
	case expires != "":
		return parseExpires(expires)
	case forD != "":
		return parseFor(forD)
	}
	return time.Time{}, fmt.Errorf("--expires or --for is required: an override lapses by itself")
}

// parseExpires parses --expires: an RFC 3339 time.
func parseExpires(expires string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, expires)
	if err != nil {
		return t, fmt.Errorf("--expires %q is not an RFC 3339 time (such as 2030-01-31T00:00:00Z)", expires)
	}
	return t, nil
}

// parseFor parses --for, a positive duration, into the time it ends from
// now.
func parseFor(forD string) (time.Time, error) {
	d, err := config.ParseDuration(forD)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("--for %q is not a positive duration (72h, 7d)", forD)
	}
	return time.Now().Add(d), nil
}

// overrideParams sets o's window and rate from --window and --rate, each
// only when given.
func overrideParams(o *sluice.Override, window, rate string) error {
	var err error
	if window != "" {
		if o.Window, err = config.ParseDuration(window); err != nil {
			return fmt.Errorf("--window: %v", err)
		}
	}
	if rate != "" {
		if o.Rate, o.Per, err = config.ParseRate(rate); err != nil {
			return fmt.Errorf("--rate: %v", err)
		}
	}
	return nil
}

// currentUser is the operating-system user's name, or "" when it cannot
// be read.
func currentUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return ""
}

// printOverrides prints list as a table, or with asJSON as the array of
// GET /v1/overrides/POLICY (windows and rates as text, never nanoseconds).
func printOverrides(w io.Writer, policy string, asJSON bool, list []sluice.KeyOverride) {
	if asJSON {
		printOverridesJSON(w, policy, list)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tLIMIT\tWINDOW/RATE\tEXPIRES\tACTOR\tREASON")
	for _, ko := range list {
		b := server.ToOverrideJSON(policy, ko.Key, ko.Override)
		param := b.Window + b.Rate
		if param == "" {
			param = "-"
		}
		fmt.Fprintln(tw, ko.Key+"\t"+strconv.FormatInt(ko.Limit, 10)+"\t"+param+"\t"+ko.Expires.UTC().Format(time.RFC3339)+"\t"+ko.Actor+"\t"+ko.Reason)
	}
	tw.Flush()
}

// printOverridesJSON prints list as the array of GET /v1/overrides/POLICY.
func printOverridesJSON(w io.Writer, policy string, list []sluice.KeyOverride) {
	out := make([]server.OverrideJSON, 0, len(list))
	for _, ko := range list {
		out = append(out, server.ToOverrideJSON(policy, ko.Key, ko.Override))
	}
	writeJSON(w, out)
}
