// Command compare runs Sluice and its peers side by side on one Valkey and
// prints a markdown report: decisions/s and p50/p99 latency at several
// concurrencies, for 100k keys, one hot key and one refused hot key, errors
// per library, and bytes per key in Valkey.
//
// Run it from the benchmarks module:
//
//	cd benchmarks && go run ./cmd/compare -duration 3s -out report.md
//
// By default it starts its own valkey-server (found on PATH) on a free
// loopback port. With -addr it uses that server instead, which must be
// dedicated to the benchmark: it is FLUSHALLed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/benchmarks"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	addr        string
	duration    time.Duration
	warmup      time.Duration
	keys        int
	memKeys     int
	conc        []int
	refusedConc []int
	targets     []benchmarks.Target
	scenarios   map[string]bool
	timeout     time.Duration
	out         string
	rev         string
	command     string
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad concurrency %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func parse(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	var conc, refused, targets, scenarios string
	fs.StringVar(&o.addr, "addr", "", "Valkey address to use instead of starting valkey-server; it is FLUSHALLed, so it must be dedicated to the benchmark")
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "duration of each timed run")
	fs.DurationVar(&o.warmup, "warmup", 250*time.Millisecond, "untimed run before each hot-key run")
	fs.IntVar(&o.keys, "keys", 100_000, "number of keys of the spread runs")
	fs.IntVar(&o.memKeys, "mem-keys", 100_000, "identities for the bytes-per-key measurement (0 skips it)")
	fs.StringVar(&conc, "conc", "1,16,128", "concurrencies (goroutines) of the spread and hot-key runs")
	fs.StringVar(&refused, "refused-conc", "128", "concurrencies of the refused-hot-key runs")
	fs.StringVar(&targets, "targets", "all", "libraries: all, or a comma list of sluice, sluice/<algorithm>, sluice-goredis/<algorithm>, valkeylimiter, redis_rate, ulule, throttled")
	fs.StringVar(&scenarios, "scenarios", "memory,spread,hot,refused", "what to measure, a comma list")
	fs.DurationVar(&o.timeout, "sluice-timeout", time.Second, "Sluice's decision timeout; decisions past it are counted as degraded")
	fs.StringVar(&o.out, "out", "", "also write the report to this file")
	fs.StringVar(&o.command, "command", "", "the command shown in the report (default: go run ./cmd/compare with these flags)")
	fs.StringVar(&o.rev, "sluice-rev", os.Getenv("SLUICE_REV"), "describes the Sluice source under test in the report (default: $SLUICE_REV, set by at.sh, else git describe of ..)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	var err error
	if o.conc, err = parseInts(conc); err != nil {
		return nil, err
	}
	if o.refusedConc, err = parseInts(refused); err != nil {
		return nil, err
	}
	if o.targets, err = benchmarks.Targets(targets); err != nil {
		return nil, err
	}
	o.scenarios = map[string]bool{}
	for _, s := range strings.Split(scenarios, ",") {
		s = strings.TrimSpace(s)
		switch s {
		case "memory", "spread", "hot", "refused":
			o.scenarios[s] = true
		case "":
		default:
			return nil, fmt.Errorf("unknown scenario %q (want memory, spread, hot, refused)", s)
		}
	}
	if o.command == "" {
		o.command = strings.TrimSpace("cd benchmarks && go run ./cmd/compare " + strings.Join(args, " "))
	}
	if o.duration <= 0 || o.keys < 1 {
		return nil, errors.New("-duration and -keys must be positive")
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "compare:", err)
		return 2
	}
	began := time.Now()
	addr, origin := o.addr, "given with -addr"
	if addr == "" {
		srv, err := benchmarks.StartServer()
		if err != nil {
			fmt.Fprintln(stderr, "compare:", err)
			return 1
		}
		defer srv.Stop()
		addr, origin = srv.Addr, "started by the harness"
	}
	admin, err := benchmarks.NewAdmin(addr)
	if err != nil {
		fmt.Fprintln(stderr, "compare:", err)
		return 1
	}
	defer admin.Close()

	h := &harness{o: o, admin: admin, addr: addr, log: stderr}
	rep := &benchmarks.Report{Header: []string{
		fmt.Sprintf("Run %s: Valkey %s on %s (%s); %s %s/%s, GOMAXPROCS=%d, %d CPUs shared by client and server.",
			time.Now().UTC().Format("2006-01-02 15:04 UTC"), admin.Version(ctx), addr, origin,
			runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.NumCPU()),
		fmt.Sprintf("Sluice at %s. Each timed run lasts %v; concurrency is goroutines calling Allow in a loop; latency is per call.", sluiceRev(o.rev), o.duration),
		"Command: `" + o.command + "`",
	}}
	if o.scenarios["memory"] && o.memKeys > 0 {
		rep.Memory = h.memory(ctx)
	}
	if o.scenarios["spread"] {
		rep.Results = append(rep.Results, h.spread(ctx)...)
	}
	if o.scenarios["hot"] {
		rep.Results = append(rep.Results, h.hot(ctx)...)
	}
	if o.scenarios["refused"] {
		rep.Results = append(rep.Results, h.refused(ctx)...)
	}
	rep.Duration = time.Since(began)
	rep.WriteMarkdown(stdout)
	if o.out != "" {
		f, err := os.Create(o.out)
		if err != nil {
			fmt.Fprintln(stderr, "compare:", err)
			return 1
		}
		rep.WriteMarkdown(f)
		if err := f.Close(); err != nil {
			fmt.Fprintln(stderr, "compare:", err)
			return 1
		}
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "compare: interrupted; the report is partial")
		return 1
	}
	return 0
}

// sluiceRev describes the Sluice source under test: rev when given, else
// the work tree the go.mod replace points to (../), from git.
func sluiceRev(rev string) string {
	if rev != "" {
		return rev
	}
	out, err := exec.Command("git", "-C", "..", "describe", "--always", "--dirty", "--abbrev=12").Output()
	if err != nil {
		return "the work tree (commit unknown)"
	}
	return "the work tree, " + strings.TrimSpace(string(out))
}

type harness struct {
	o     *options
	admin *benchmarks.Admin
	addr  string
	log   io.Writer
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(h.log, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// open opens every target with profile p; targets that fail are logged and
// left out.
func (h *harness) open(p benchmarks.Profile) ([]benchmarks.Target, []benchmarks.Decider) {
	var ts []benchmarks.Target
	var ds []benchmarks.Decider
	for _, t := range h.o.targets {
		d, err := t.Open(benchmarks.Config{Addr: h.addr, Profile: p, SluiceTimeout: h.o.timeout})
		if err != nil {
			h.logf("%s: open: %v (left out)", t.Label(), err)
			continue
		}
		ts = append(ts, t)
		ds = append(ds, d)
	}
	return ts, ds
}

func closeAll(ds []benchmarks.Decider) {
	for _, d := range ds {
		d.Close()
	}
}

// memory measures, for each target alone on an empty Valkey, the
// used_memory and DBSIZE growth of one decision on each of memKeys
// identities under the Refuse profile (10 per hour: the state lives an
// hour or six minutes, so nothing expires while it is measured).
func (h *harness) memory(ctx context.Context) []benchmarks.Memory {
	keys := benchmarks.MakeKeys(h.o.memKeys)
	var out []benchmarks.Memory
	for _, t := range h.o.targets {
		if ctx.Err() != nil {
			break
		}
		m := benchmarks.Memory{Target: t, Identities: len(keys)}
		m.BytesPerKey, m.KeysPerID, m.Err = h.memoryOf(ctx, t, keys)
		if m.Err != nil {
			h.logf("memory %s: %v", t.Label(), m.Err)
		} else {
			h.logf("memory %s: %.0f bytes and %.2f keys per identity", t.Label(), m.BytesPerKey, m.KeysPerID)
		}
		out = append(out, m)
	}
	return out
}

func (h *harness) memoryOf(ctx context.Context, t benchmarks.Target, keys []string) (bytes, perID float64, err error) {
	if err := h.admin.FlushAll(ctx); err != nil {
		return 0, 0, err
	}
	d, err := t.Open(benchmarks.Config{Addr: h.addr, Profile: benchmarks.Refuse, SluiceTimeout: h.o.timeout})
	if err != nil {
		return 0, 0, err
	}
	defer d.Close()
	// Load the scripts and open the connections before the baseline.
	if _, err := benchmarks.Prepare(ctx, d, []string{"warm-a", "warm-b", "warm-c", "warm-d"}, 4); err != nil {
		return 0, 0, err
	}
	if err := h.admin.FlushAll(ctx); err != nil {
		return 0, 0, err
	}
	before, err := h.admin.UsedMemory(ctx)
	if err != nil {
		return 0, 0, err
	}
	allowed, err := benchmarks.Prepare(ctx, d, keys, 64)
	if err != nil {
		return 0, 0, err
	}
	if allowed != int64(len(keys)) {
		return 0, 0, fmt.Errorf("%d of %d first decisions allowed", allowed, len(keys))
	}
	after, err := h.admin.UsedMemory(ctx)
	if err != nil {
		return 0, 0, err
	}
	n, err := h.admin.DBSize(ctx)
	if err != nil {
		return 0, 0, err
	}
	return float64(after-before) / float64(len(keys)), float64(n) / float64(len(keys)), nil
}

// rotate returns the indices 0..n-1 starting at round mod n, so that no
// target always runs first (the machine is shared and drifts).
func rotate(n, round int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = (i + round) % n
	}
	return idx
}

// spread: every target's keys are prepared (one decision each, checked to
// be allowed) on one Valkey, then the targets take turns at each
// concurrency.
func (h *harness) spread(ctx context.Context) []benchmarks.Result {
	if err := h.admin.FlushAll(ctx); err != nil {
		h.logf("spread: %v", err)
		return nil
	}
	ts, ds := h.open(benchmarks.Spread)
	defer closeAll(ds)
	keys := benchmarks.MakeKeys(h.o.keys)
	ready := make([]bool, len(ts))
	for i, t := range ts {
		start := time.Now()
		allowed, err := benchmarks.Prepare(ctx, ds[i], keys, 64)
		switch {
		case err != nil:
			h.logf("spread %s: preparing keys: %v (left out)", t.Label(), err)
		case allowed != int64(len(keys)):
			h.logf("spread %s: only %d of %d keys allowed while preparing (left out)", t.Label(), allowed, len(keys))
		default:
			ready[i] = true
			h.logf("spread %s: %d keys prepared in %v", t.Label(), len(keys), time.Since(start).Round(time.Millisecond))
		}
	}
	var out []benchmarks.Result
	round := 0
	for _, c := range h.o.conc {
		res := make([]benchmarks.Result, len(ts))
		for _, i := range rotate(len(ts), round) {
			if !ready[i] || ctx.Err() != nil {
				continue
			}
			res[i] = h.timed(ctx, ts[i], ds[i], benchmarks.ScenarioSpread, c, keys)
			h.logRun(res[i])
		}
		round++
		for _, r := range res {
			if r.Stats != nil {
				out = append(out, r)
			}
		}
	}
	return out
}

// hot: one fresh key per target and concurrency, warmed up untimed.
func (h *harness) hot(ctx context.Context) []benchmarks.Result {
	ts, ds := h.open(benchmarks.Hot)
	defer closeAll(ds)
	return h.hotRuns(ctx, ts, ds, benchmarks.ScenarioHot, h.o.conc, func(c int) string { return "hot-c" + strconv.Itoa(c) })
}

// refused: one key exhausted before timing, so every timed decision is a
// refusal.
func (h *harness) refused(ctx context.Context) []benchmarks.Result {
	ts, ds := h.open(benchmarks.Refuse)
	defer closeAll(ds)
	for i := range ds {
		for j := 0; j < 20; j++ {
			if _, err := ds[i].Allow(ctx, "refused"); err != nil {
				h.logf("refused %s: %v", ts[i].Label(), err)
				break
			}
		}
	}
	return h.hotRuns(ctx, ts, ds, benchmarks.ScenarioRefused, h.o.refusedConc, func(int) string { return "refused" })
}

func (h *harness) hotRuns(ctx context.Context, ts []benchmarks.Target, ds []benchmarks.Decider, sc benchmarks.Scenario, conc []int, key func(int) string) []benchmarks.Result {
	var out []benchmarks.Result
	for round, c := range conc {
		keys := []string{key(c)}
		res := make([]benchmarks.Result, len(ts))
		for _, i := range rotate(len(ts), round) {
			if ctx.Err() != nil {
				break
			}
			if h.o.warmup > 0 {
				benchmarks.Run(ctx, ds[i], benchmarks.Load{Concurrency: c, Duration: h.o.warmup, Keys: keys})
			}
			res[i] = h.timed(ctx, ts[i], ds[i], sc, c, keys)
			h.logRun(res[i])
		}
		for _, r := range res {
			if r.Stats != nil {
				out = append(out, r)
			}
		}
	}
	return out
}

// timed is one timed run, with the CPU time this process and the server
// used during it.
func (h *harness) timed(ctx context.Context, t benchmarks.Target, d benchmarks.Decider, sc benchmarks.Scenario, c int, keys []string) benchmarks.Result {
	srv0, srvErr := h.admin.ServerCPU(ctx)
	cli0 := benchmarks.ProcessCPU()
	st := benchmarks.Run(ctx, d, benchmarks.Load{Concurrency: c, Duration: h.o.duration, Keys: keys})
	r := benchmarks.Result{Target: t, Scenario: sc, Concurrency: c, Stats: st, ClientCPU: benchmarks.ProcessCPU() - cli0}
	if srv1, err := h.admin.ServerCPU(ctx); err == nil && srvErr == nil {
		r.ServerCPU = srv1 - srv0
	}
	return r
}

func (h *harness) logRun(r benchmarks.Result) {
	st := r.Stats
	h.logf("%-15s %-30s c=%-4d %10s/s  p50 %-8s p99 %-8s allowed %d denied %d errors %d degraded %d  cpu client %v server %v",
		r.Scenario, r.Target.Label(), r.Concurrency, benchmarks.FormatRate(st.Rate()),
		benchmarks.FormatDuration(st.Latency.Quantile(0.5)), benchmarks.FormatDuration(st.Latency.Quantile(0.99)),
		st.Allowed, st.Denied, st.Errors, st.Degraded, r.ClientCPU.Round(time.Millisecond), r.ServerCPU.Round(time.Millisecond))
}
