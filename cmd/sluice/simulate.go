package main

import (
	"context"
	"errors"
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
	var policySpecs, trafficSpecs []string
	fs.Func("policy", "a policy, as a config file's fields: algorithm=sliding_log,limit=5,window=15m (repeatable)", func(s string) error {
		policySpecs = append(policySpecs, s)
		return nil
	})
	fs.Func("traffic", "synthetic traffic (repeatable): steady:RATE, poisson:RATE, burst:N@TIME, on-off:RATE,on=D,off=D, retry:RATE", func(s string) error {
		trafficSpecs = append(trafficSpecs, s)
		return nil
	})
	configFile := fs.String("config", "", "configuration file whose policies are simulated (or, with --replay, the changed configuration)")
	only := fs.String("only", "", "comma-separated names of the config's policies to simulate (default all)")
	trace := fs.String("trace", "", "file of requests: CSV (time,key[,cost]) or JSON lines; time is RFC 3339 or an offset such as 1.5s")
	duration := fs.String("duration", "", "simulated time (default: to the end of the trace, or 10s)")
	bucket := fs.String("bucket", "", "width of a time bucket (default: about 300 buckets)")
	rateWindow := fs.String("rate-window", "", "span the admitted rate is measured over (default: each policy's period)")
	seed := fs.Uint64("seed", 1, "seed of random traffic")
	watch := fs.String("watch", "", "key whose remaining units are drawn (default: the first source's first key)")
	out := fs.String("out", "simulate", "prefix of the files written: PREFIX.csv, PREFIX.svg, PREFIX.png (with --replay: PREFIX-flips.csv)")
	formats := fs.String("format", "csv,svg,png", "files to write: any of csv, svg, png")
	decisions := fs.String("decisions", "", "also write every decision to this file (JSON lines), for --replay")
	maxDecisions := fs.Int64("max-decisions", simulate.DefaultMaxDecisions, "refuse runs that would make more decisions")
	replay := fs.String("replay", "", "decision log to decide again under --config")
	top := fs.Int("top", 10, "with --replay: keys listed per policy")
	if code, ok := parseFlags(fs, simulateUsage, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(fs, stderr, "unexpected argument %q", fs.Arg(0))
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "sluice simulate:", err)
		return 1
	}
	usage := func(format string, args ...any) int {
		return usageError(fs, stderr, format, args...)
	}
	policies, err := simulatePolicies(*configFile, *only, policySpecs)
	if err != nil {
		return usage("%v", err)
	}
	if *replay != "" {
		if *configFile == "" {
			return usage("--replay needs --config, the changed configuration")
		}
		for name, set := range map[string]bool{"--traffic": len(trafficSpecs) > 0, "--trace": *trace != "", "--policy": len(policySpecs) > 0,
			"--decisions": *decisions != "", "--duration": *duration != "", "--bucket": *bucket != "", "--rate-window": *rateWindow != "", "--watch": *watch != ""} {
			if set {
				return usage("%s does not apply to --replay", name)
			}
		}
		return runReplay(ctx, *replay, *configFile, policies, *top, *out, stdout, stderr)
	}
	opts := simulate.Options{Policies: policies, Trace: *trace, Seed: *seed, Watch: *watch, MaxDecisions: *maxDecisions}
	for _, s := range trafficSpecs {
		t, err := simulate.ParseTraffic(s)
		if err != nil {
			return usage("%v", err)
		}
		opts.Traffic = append(opts.Traffic, t)
	}
	for _, d := range []struct {
		flag string
		val  string
		dst  *time.Duration
	}{{"--duration", *duration, &opts.Duration}, {"--bucket", *bucket, &opts.Bucket}, {"--rate-window", *rateWindow, &opts.RateWindow}} {
		if d.val == "" {
			continue
		}
		v, err := config.ParseDuration(d.val)
		if err != nil || v <= 0 {
			return usage("%s: want a positive duration such as 10s or 24h, got %q", d.flag, d.val)
		}
		*d.dst = v
	}
	want := map[string]bool{}
	for _, f := range strings.Split(*formats, ",") {
		f = strings.TrimSpace(f)
		if f != "csv" && f != simulate.SVG && f != simulate.PNG {
			return usage("--format: unknown %q (want csv, svg, png)", f)
		}
		want[f] = true
	}
	var logFile *os.File
	if *decisions != "" {
		if logFile, err = os.Create(*decisions); err != nil {
			return fail(err)
		}
		defer logFile.Close()
		opts.Decisions = logFile
	}
	plan, err := simulate.NewPlan(opts)
	if err != nil {
		var tl *simulate.TooLongError
		if errors.As(err, &tl) {
			return fail(err)
		}
		return usage("%v", err)
	}
	// Say up front what the run is, and about how long it takes.
	what := fmt.Sprintf("%d policies", len(policies))
	if len(policies) == 1 {
		what = "1 policy"
	}
	fmt.Fprintf(stdout, "simulating %s over %v in buckets of %v: about %d decisions", what, plan.Duration, plan.Bucket, plan.Decisions)
	if est := plan.Estimate(); est >= time.Second {
		fmt.Fprintf(stdout, ", about %v of work", est.Round(time.Second))
	}
	fmt.Fprintln(stdout)
	began := time.Now()
	res, err := plan.Run(ctx)
	if err != nil {
		return fail(err)
	}
	if logFile != nil {
		if err := logFile.Close(); err != nil {
			return fail(err)
		}
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "policy\trule\tkeys\trequests\tallowed\trefused\tadmitted/s (all keys)\tnominal/s per key\t")
	for _, p := range res.Policies {
		rate := float64(0)
		for _, b := range p.Buckets {
			rate += float64(b.AllowedUnits)
		}
		rate /= res.Duration.Seconds()
		fmt.Fprintf(tw, "%s\t%v\t%d\t%d\t%d\t%d\t%.4g\t%.4g\t\n", p.Name, p.Rule, p.Keys, p.Requests, p.Allowed, p.Refused, rate, p.Nominal)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "done in %v\n", time.Since(began).Round(time.Millisecond))
	write := func(ext string, fn func(io.Writer) error) error {
		name := *out + "." + ext
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
		fmt.Fprintf(stdout, "wrote %s\n", name)
		return nil
	}
	if want["csv"] {
		if err := write("csv", func(w io.Writer) error { return simulate.WriteCSV(w, res) }); err != nil {
			return fail(err)
		}
	}
	for _, f := range []string{simulate.SVG, simulate.PNG} {
		if want[f] {
			if err := write(f, func(w io.Writer) error { return simulate.WritePicture(w, res, f) }); err != nil {
				return fail(err)
			}
		}
	}
	if logFile != nil {
		fmt.Fprintf(stdout, "wrote %s\n", *decisions)
	}
	return 0
}

// simulatePolicies returns the policies of the config file (only those
// named in only, when set) and of the --policy values.
func simulatePolicies(file, only string, specs []string) ([]*config.Policy, error) {
	var out []*config.Policy
	if file != "" {
		cfg, err := config.Load(file)
		if err != nil {
			return nil, err
		}
		out = cfg.Policies
		if only != "" {
			out = nil
			for _, name := range strings.Split(only, ",") {
				p := cfg.Policy(strings.TrimSpace(name))
				if p == nil {
					return nil, fmt.Errorf("--only: %s has no policy %q", file, name)
				}
				out = append(out, p)
			}
		}
	} else if only != "" {
		return nil, errors.New("--only selects policies of --config")
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

func runReplay(ctx context.Context, log, configFile string, policies []*config.Policy, top int, out string, stdout, stderr io.Writer) int {
	res, err := simulate.Replay(ctx, log, policies)
	if err != nil {
		fmt.Fprintln(stderr, "sluice simulate:", err)
		return 1
	}
	fmt.Fprintf(stdout, "replayed %d decisions of %s under %s\n", res.Decisions, log, configFile)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
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
	for _, p := range res.Policies {
		if p.OverLimit > 0 {
			fmt.Fprintf(stdout, "policy %s: %d requests cost more than the new limit %d and could never be allowed\n", p.Name, p.OverLimit, p.Rule.Limit)
		}
		if len(p.Keys) == 0 || top <= 0 {
			continue
		}
		fmt.Fprintf(stdout, "\npolicy %s, keys with the most flips:\n", p.Name)
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "key\tallow→deny\tdeny→allow\t")
		for i, k := range p.Keys {
			if i == top {
				break
			}
			fmt.Fprintf(tw, "%q\t%d\t%d\t\n", k.Key, k.ToDeny, k.ToAllow)
		}
		tw.Flush()
	}
	if len(res.Missing) > 0 {
		fmt.Fprintf(stdout, "\npolicies in the log that %s does not have (their decisions are not replayed):\n", configFile)
		names := make([]string, 0, len(res.Missing))
		for name := range res.Missing {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			fmt.Fprintf(stdout, "  %s: %d decisions\n", name, res.Missing[name])
		}
	}
	name := out + "-flips.csv"
	f, err := os.Create(name)
	if err != nil {
		fmt.Fprintln(stderr, "sluice simulate:", err)
		return 1
	}
	err = simulate.WriteFlipsCSV(f, res)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintln(stderr, "sluice simulate:", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s\n", name)
	return 0
}
