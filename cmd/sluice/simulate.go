package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/simulate"
)

const simulateUsage = `usage: sluice simulate [--config FILE | --policy SPEC...] (--traffic SPEC... | --trace FILE) [flags]
       sluice simulate --replay LOG --config CHANGED.yaml [flags]

Runs policies on the in-process store with a simulated clock and writes
what they decided, per time bucket: PREFIX.csv, PREFIX.svg and PREFIX.png
(one row per policy: requests allowed and refused, the watched key's
remaining units, the rate admitted to all keys together over the rate
window, the units in it divided by the whole window, against the nominal
rate times the keys that sent requests in that window).

Traffic (--traffic, repeatable; RATE as in a config file, such as 12/s):
  steady:RATE              one request every 1/RATE
  poisson:RATE             random arrivals at RATE on average
  burst:N@TIME             N requests at one instant, such as burst:10@990ms
  on-off:RATE,on=D,off=D   RATE for D, silence for D, repeated
  retry:RATE               one client that honours Retry-After
  options: key=NAME keys=N cost=N from=TIME until=TIME
  for in_flight policies: hold=D (200ms), hold=exp:MEAN or hold=MIN-MAX,
  how long each allowed request holds its lease (renewing it every third
  of lease); crash=FRACTION (0.05 or 5%) of holders never release
An in_flight policy's row draws the leases held by the watched key against
its limit, and by all keys together (those of crashed holders filled).
--policy takes a config file's policy fields: algorithm=gcra,burst=10,rate=10/s

With --replay, each decision of LOG (as --decisions writes it) is decided
again under the policies of --config, and the decisions that would flip
are reported per policy and key.

Flags:
`

// runSimulate is sluice simulate. Exit code 0 on success, 1 when the
// simulation fails, 2 for bad usage.
func runSimulate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("simulate")
	f := defineSimulateFlags(fs)
	if code, ok := parseNoArgs(fs, simulateUsage, args, stdout, stderr); !ok {
		return code
	}
	return simulateExit(fs, f.run(ctx, stdout), stderr)
}

// simulateUsageError is a misuse of sluice simulate's flags.
type simulateUsageError struct{ error }

// simulateExit reports err (nil: success) and returns the exit code: 2,
// with a pointer to -h, for a misuse; 1 for a failure.
func simulateExit(fs *flag.FlagSet, err error, stderr io.Writer) int {
	var u simulateUsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &u):
		return usageError(fs, stderr, "%v", u.error)
	}
	fmt.Fprintln(stderr, "sluice simulate:", err)
	return 1
}

// run is sluice simulate once its flags are parsed: a replay with
// --replay, else a simulation. Misuses are simulateUsageErrors.
func (f *simulateFlags) run(ctx context.Context, stdout io.Writer) error {
	policies, err := simulatePolicies(f.configFile, f.only, f.policySpecs)
	if err != nil {
		return simulateUsageError{err}
	}
	if f.replay != "" {
		if err := f.checkReplay(); err != nil {
			return simulateUsageError{err}
		}
		return runReplay(ctx, f.replay, f.configFile, policies, f.top, f.out, stdout)
	}
	return f.simulate(ctx, policies, stdout)
}

// simulate runs the simulation of policies the flags describe, and
// writes its files.
func (f *simulateFlags) simulate(ctx context.Context, policies []*config.Policy, stdout io.Writer) error {
	opts, want, err := f.prepare(policies)
	if err != nil {
		return simulateUsageError{err}
	}
	logFile, err := openDecisionLog(f.decisions, &opts)
	if err != nil {
		return err
	}
	defer logFile.Close() // a nil *os.File: an error, ignored
	plan, err := newSimulatePlan(opts)
	if err != nil {
		return err
	}
	res, err := runPlan(ctx, plan, len(policies), logFile, stdout)
	if err != nil {
		return err
	}
	return f.writeFiles(stdout, want, res, logFile != nil)
}

// prepare returns the simulation's options and the set of files to
// write, from the flags.
func (f *simulateFlags) prepare(policies []*config.Policy) (simulate.Options, map[string]bool, error) {
	opts, err := f.options(policies)
	if err != nil {
		return opts, nil, err
	}
	want, err := parseFormats(f.formats)
	return opts, want, err
}

// newSimulatePlan plans the run of opts; a plan refused for anything
// but its length is a misuse (a simulateUsageError).
func newSimulatePlan(opts simulate.Options) (*simulate.Plan, error) {
	plan, err := simulate.NewPlan(opts)
	var tl *simulate.TooLongError
	if err != nil && !errors.As(err, &tl) {
		return nil, simulateUsageError{err}
	}
	return plan, err
}

// writeFiles writes the files of res that want holds, and names the
// decision log when one was written.
func (f *simulateFlags) writeFiles(stdout io.Writer, want map[string]bool, res *simulate.Result, logged bool) error {
	if err := writeSimulateFiles(stdout, f.out, want, res); err != nil {
		return err
	}
	if logged {
		fmt.Fprintf(stdout, "wrote %s\n", f.decisions)
	}
	return nil
}

// simulateFlags are the flags of sluice simulate.
type simulateFlags struct {
	policySpecs, trafficSpecs []string

	configFile, only, trace        string
	duration, bucket, rateWindow   string
	watch, out, formats, decisions string
	replay                         string
	seed                           uint64
	maxDecisions                   int64
	top, processes                 int
}

// defineSimulateFlags defines the flags of sluice simulate on fs.
func defineSimulateFlags(fs *flag.FlagSet) *simulateFlags {
	f := &simulateFlags{}
	fs.Func("policy", "a policy, as a config file's fields: algorithm=sliding_log,limit=5,window=15m (repeatable)", func(s string) error {
		f.policySpecs = append(f.policySpecs, s)
		return nil
	})
	fs.Func("traffic", "synthetic traffic (repeatable): steady:RATE, poisson:RATE, burst:N@TIME, on-off:RATE,on=D,off=D, retry:RATE", func(s string) error {
		f.trafficSpecs = append(f.trafficSpecs, s)
		return nil
	})
	fs.StringVar(&f.configFile, "config", "", "configuration file whose policies are simulated (or, with --replay, the changed configuration)")
	fs.StringVar(&f.only, "only", "", "comma-separated names of the config's policies to simulate (default all)")
	fs.StringVar(&f.trace, "trace", "", "file of requests: CSV (time,key[,cost]) or JSON lines; time is RFC 3339 or an offset such as 1.5s")
	fs.StringVar(&f.duration, "duration", "", "simulated time (default: to the end of the trace, or 10s)")
	fs.StringVar(&f.bucket, "bucket", "", "width of a time bucket (default: about 300 buckets)")
	fs.StringVar(&f.rateWindow, "rate-window", "", "span the admitted rate is measured over (default: each policy's period)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of random traffic")
	fs.StringVar(&f.watch, "watch", "", "key whose remaining units are drawn (default: the first source's first key)")
	fs.StringVar(&f.out, "out", "simulate", "prefix of the files written: PREFIX.csv, PREFIX.svg, PREFIX.png (with --replay: PREFIX-flips.csv)")
	fs.StringVar(&f.formats, "format", "csv,svg,png", "files to write: any of csv, svg, png")
	fs.StringVar(&f.decisions, "decisions", "", "also write every decision to this file (JSON lines), for --replay")
	fs.Int64Var(&f.maxDecisions, "max-decisions", simulate.DefaultMaxDecisions, "refuse runs that would make more decisions")
	fs.StringVar(&f.replay, "replay", "", "decision log to decide again under --config")
	fs.IntVar(&f.top, "top", 10, "with --replay: keys listed per policy")
	fs.IntVar(&f.processes, "processes", 1, "a policy with grants is also run over this many simulated processes, drawn beside the exact policy")
	return f
}

// checkReplay refuses the flags that --replay has no use for.
func (f *simulateFlags) checkReplay() error {
	if f.configFile == "" {
		return errors.New("--replay needs --config, the changed configuration")
	}
	for _, c := range []struct {
		name string
		set  bool
	}{
		{"--traffic", len(f.trafficSpecs) > 0}, {"--trace", f.trace != ""}, {"--policy", len(f.policySpecs) > 0},
		{"--decisions", f.decisions != ""}, {"--duration", f.duration != ""}, {"--bucket", f.bucket != ""},
		{"--rate-window", f.rateWindow != ""}, {"--watch", f.watch != ""}, {"--processes", f.processes != 1},
	} {
		if c.set {
			return fmt.Errorf("%s does not apply to --replay", c.name)
		}
	}
	return nil
}

// options returns the simulation's options: the policies, the parsed
// traffic and the durations of the flags.
func (f *simulateFlags) options(policies []*config.Policy) (simulate.Options, error) {
	opts := simulate.Options{Policies: policies, Trace: f.trace, Seed: f.seed, Watch: f.watch, MaxDecisions: f.maxDecisions, Processes: f.processes}
	var err error
	if opts.Traffic, err = parseTraffics(f.trafficSpecs); err != nil {
		return opts, err
	}
	for _, d := range []struct {
		flag string
		val  string
		dst  *time.Duration
	}{{"--duration", f.duration, &opts.Duration}, {"--bucket", f.bucket, &opts.Bucket}, {"--rate-window", f.rateWindow, &opts.RateWindow}} {
		if d.val == "" {
			continue
		}
		v, err := config.ParseDuration(d.val)
		if err != nil || v <= 0 {
			return opts, fmt.Errorf("%s: want a positive duration such as 10s or 24h, got %q", d.flag, d.val)
		}
		*d.dst = v
	}
	return opts, nil
}

// parseTraffics parses the --traffic values, in order.
func parseTraffics(specs []string) ([]simulate.Traffic, error) {
	var out []simulate.Traffic
	for _, s := range specs {
		t, err := simulate.ParseTraffic(s)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// parseFormats returns the set of files --format asks for.
func parseFormats(formats string) (map[string]bool, error) {
	want := map[string]bool{}
	for _, f := range strings.Split(formats, ",") {
		f = strings.TrimSpace(f)
		if f != "csv" && f != simulate.SVG && f != simulate.PNG {
			return nil, fmt.Errorf("--format: unknown %q (want csv, svg, png)", f)
		}
		want[f] = true
	}
	return want, nil
}

// openDecisionLog creates the --decisions file, when asked for, and has
// opts write every decision to it; nil without --decisions.
func openDecisionLog(name string, opts *simulate.Options) (*os.File, error) {
	if name == "" {
		return nil, nil
	}
	f, err := os.Create(name)
	if err != nil {
		return nil, err
	}
	opts.Decisions = f
	return f, nil
}

// runPlan runs plan, saying first what it is and then what it decided
// and how long it took; logFile, when not nil, is closed at the end.
func runPlan(ctx context.Context, plan *simulate.Plan, policies int, logFile *os.File, stdout io.Writer) (*simulate.Result, error) {
	announcePlan(stdout, policies, plan)
	began := time.Now()
	res, err := plan.Run(ctx)
	if err != nil {
		return nil, err
	}
	if logFile != nil {
		if err := logFile.Close(); err != nil {
			return nil, err
		}
	}
	printSimulateSummary(stdout, res)
	fmt.Fprintf(stdout, "done in %v\n", time.Since(began).Round(time.Millisecond))
	return res, nil
}

// announcePlan says up front what the run is, and about how long it takes.
func announcePlan(w io.Writer, policies int, plan *simulate.Plan) {
	what := fmt.Sprintf("%d policies", policies)
	if policies == 1 {
		what = "1 policy"
	}
	fmt.Fprintf(w, "simulating %s over %v in buckets of %v: about %d decisions", what, plan.Duration, plan.Bucket, plan.Decisions)
	if est := plan.Estimate(); est >= time.Second {
		fmt.Fprintf(w, ", about %v of work", est.Round(time.Second))
	}
	fmt.Fprintln(w)
}

// printSimulateSummary writes a table of what each policy decided.
func printSimulateSummary(w io.Writer, res *simulate.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "policy\trule\tkeys\trequests\tallowed\trefused\tadmitted/s (all keys)\tnominal/s per key\t")
	for _, p := range res.Policies {
		rate := float64(0)
		for _, b := range p.Buckets {
			rate += float64(b.AllowedUnits)
		}
		rate /= res.Duration.Seconds()
		nominal := fmt.Sprintf("%.4g", p.Nominal)
		if p.InFlight() {
			nominal = "-"
		}
		fmt.Fprintf(tw, "%s\t%v\t%d\t%d\t%d\t%d\t%.4g\t%s\t\n", p.Name, p.Rule, p.Keys, p.Requests, p.Allowed, p.Refused, rate, nominal)
	}
	tw.Flush()
	for _, p := range res.Policies {
		if p.InFlight() {
			fmt.Fprintln(w, leaseSummary(p))
		}
	}
}

// leaseSummary is a line of what an in_flight policy's holders did.
func leaseSummary(p *simulate.PolicyResult) string {
	var peak int64
	for _, b := range p.Buckets {
		peak = max(peak, b.Peak)
	}
	return fmt.Sprintf("%s: at most %d leases held at once by one key (limit %d); %d released, %d holders crashed (each lease then ends %v after it was taken), %d renewals lost",
		p.Name, peak, p.Rule.Limit, p.Released, p.Crashed, p.Rule.Window, p.RenewalsLost)
}

// writeSimulateFiles writes PREFIX.csv, PREFIX.svg and PREFIX.png, those
// of them that want holds, saying each on w.
func writeSimulateFiles(w io.Writer, prefix string, want map[string]bool, res *simulate.Result) error {
	for _, ext := range []string{"csv", simulate.SVG, simulate.PNG} {
		if !want[ext] {
			continue
		}
		if err := writeSimulateFile(w, prefix+"."+ext, simulateWriter(res, ext)); err != nil {
			return err
		}
	}
	return nil
}

// simulateWriter writes res as the file of extension ext: CSV, or a
// picture (svg, png).
func simulateWriter(res *simulate.Result, ext string) func(io.Writer) error {
	if ext == "csv" {
		return func(w io.Writer) error { return simulate.WriteCSV(w, res) }
	}
	return func(w io.Writer) error { return simulate.WritePicture(w, res, ext) }
}

// writeSimulateFile creates the file name, writes it with fn and says so
// on w.
func writeSimulateFile(w io.Writer, name string, fn func(io.Writer) error) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote %s\n", name)
	return nil
}

// simulatePolicies returns the policies of the config file (only those
// named in only, when set) and of the --policy values.
func simulatePolicies(file, only string, specs []string) ([]*config.Policy, error) {
	out, err := configPolicies(file, only)
	if err != nil {
		return nil, err
	}
	if len(specs) > 0 {
		ps, err := simulate.ParsePolicies(specs)
		if err != nil {
			return nil, err
		}
		out = append(out, ps...)
	}
	if len(out) == 0 {
		return nil, errors.New("no policies: give --config FILE or --policy SPEC (such as --policy algorithm=gcra,burst=10,rate=10/s)")
	}
	return out, nil
}

// configPolicies returns the policies of the config file, only those
// named in only (comma-separated) when set; none without a file.
func configPolicies(file, only string) ([]*config.Policy, error) {
	if file == "" {
		if only != "" {
			return nil, errors.New("--only selects policies of --config")
		}
		return nil, nil
	}
	cfg, err := config.Load(file)
	if err != nil {
		return nil, err
	}
	if only == "" {
		return cfg.Policies, nil
	}
	var out []*config.Policy
	for _, name := range strings.Split(only, ",") {
		p := cfg.Policy(strings.TrimSpace(name))
		if p == nil {
			return nil, fmt.Errorf("--only: %s has no policy %q", file, name)
		}
		out = append(out, p)
	}
	return out, nil
}

// runReplay is sluice simulate --replay: it decides the decisions of log
// again under policies and reports those that flip.
func runReplay(ctx context.Context, log, configFile string, policies []*config.Policy, top int, out string, stdout io.Writer) error {
	res, err := simulate.Replay(ctx, log, policies)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "replayed %d decisions of %s under %s\n", res.Decisions, log, configFile)
	printReplayTable(stdout, res)
	for _, p := range res.Policies {
		printPolicyFlips(stdout, p, top)
	}
	printMissingPolicies(stdout, configFile, res.Missing)
	name := out + "-flips.csv"
	if err := writeFlipsFile(name, res); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", name)
	return nil
}

// printReplayTable writes a table of what each policy decided before and
// after.
func printReplayTable(w io.Writer, res *simulate.ReplayResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "policy\trule\tdecisions\tallowed before\tallowed after\tallow→deny\tdeny→allow\tkeys flipped\t")
	for _, p := range res.Policies {
		rule := p.Rule.String()
		if p.Shadow {
			rule += " shadow"
		}
		keys := fmt.Sprint(len(p.Keys))
		if p.KeysCut {
			keys = "more than " + keys
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t\n", p.Name, rule, p.Decisions, p.Before, p.After, p.ToDeny, p.ToAllow, keys)
	}
	tw.Flush()
}

// printPolicyFlips writes the requests of p that no longer fit its limit
// and the top keys with the most flips.
func printPolicyFlips(w io.Writer, p *simulate.ReplayPolicy, top int) {
	if p.OverLimit > 0 {
		fmt.Fprintf(w, "policy %s: %d requests cost more than the new limit %d and could never be allowed\n", p.Name, p.OverLimit, p.Rule.Limit)
	}
	if len(p.Keys) == 0 || top <= 0 {
		return
	}
	fmt.Fprintf(w, "\npolicy %s, keys with the most flips:\n", p.Name)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "key\tallow→deny\tdeny→allow\t")
	for _, k := range p.Keys[:min(top, len(p.Keys))] {
		fmt.Fprintf(tw, "%q\t%d\t%d\t\n", k.Key, k.ToDeny, k.ToAllow)
	}
	tw.Flush()
}

// printMissingPolicies lists, by name, the policies of the log that the
// configuration lacks.
func printMissingPolicies(w io.Writer, configFile string, missing map[string]int64) {
	if len(missing) == 0 {
		return
	}
	fmt.Fprintf(w, "\npolicies in the log that %s does not have (their decisions are not replayed):\n", configFile)
	names := make([]string, 0, len(missing))
	for name := range missing {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %s: %d decisions\n", name, missing[name])
	}
}

// writeFlipsFile writes the flips of res as CSV to the file name.
func writeFlipsFile(name string, res *simulate.ReplayResult) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	err = simulate.WriteFlipsCSV(f, res)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
