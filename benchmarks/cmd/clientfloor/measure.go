package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/benchmarks"
)

// sample is what one timed run of one target measured.
type sample struct {
	rate     float64 // decisions/s
	cliUS    float64 // this process's CPU µs per decision
	srvUS    float64 // valkey-server's CPU µs per decision
	allocs   float64 // heap allocations per decision
	evalsha  float64 // EVALSHA calls the server counted per decision
	p50, p99 time.Duration
	st       *benchmarks.Stats
}

// measure opens every target on one Valkey, prepares its keys, and runs
// o.rounds rounds of one timed run per target, the first target rotating,
// then writes every run and each target's medians.
func measure(ctx context.Context, o *options, out, log io.Writer) error {
	addr, origin := o.addr, "given with -addr"
	if addr == "" {
		srv, err := benchmarks.StartServer()
		if err != nil {
			return err
		}
		defer srv.Stop()
		addr, origin = srv.Addr, "started by the harness"
	}
	admin, err := benchmarks.NewAdmin(addr)
	if err != nil {
		return err
	}
	defer admin.Close()
	if err := admin.FlushAll(ctx); err != nil {
		return err
	}
	keys := benchmarks.MakeKeys(o.keys)
	ds := make([]benchmarks.Decider, len(o.targets))
	for i, t := range o.targets {
		d, err := t.open(addr, o)
		if err != nil {
			return fmt.Errorf("%s: %w", t.label, err)
		}
		defer d.Close()
		ds[i] = d
		allowed, err := benchmarks.Prepare(ctx, d, keys, 64)
		if err != nil {
			return fmt.Errorf("%s: preparing keys: %w", t.label, err)
		}
		if allowed != int64(len(keys)) {
			return fmt.Errorf("%s: %d of %d keys allowed while preparing", t.label, allowed, len(keys))
		}
	}
	fmt.Fprintf(out, "Run %s: Valkey %s on %s (%s); %s %s/%s, GOMAXPROCS=%d, %d CPUs shared by client and server.\n",
		time.Now().UTC().Format("2006-01-02 15:04:05 UTC"), admin.Version(ctx), addr, origin,
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.NumCPU())
	fmt.Fprintf(out, "%d goroutines, %d keys, runs of %v, %d rounds; floors: at most %d keys per call, %d calls in flight.\n",
		o.conc, o.keys, o.duration, o.rounds, o.maxKeys, o.inflight)
	fmt.Fprintf(out, "Load average before: %s.\n\n", loadAverage())
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	fmt.Fprintln(out, "| round | target | decisions/s | client CPU µs/decision | server CPU µs/decision | allocs/decision | decisions per EVALSHA | p50 | p99 | allowed | denied | errors |")
	fmt.Fprintln(out, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	samples := make([][]sample, len(o.targets))
	for r := 0; r < o.rounds; r++ {
		for k := range o.targets {
			i := (k + r) % len(o.targets)
			s, err := timed(ctx, o, admin, ds[i], keys)
			if err != nil {
				return fmt.Errorf("%s: %w", o.targets[i].label, err)
			}
			samples[i] = append(samples[i], s)
			fmt.Fprintf(out, "| %d | %s | %s | %.2f | %.2f | %.2f | %s | %s | %s | %d | %d | %d |\n",
				r+1, o.targets[i].label, benchmarks.FormatRate(s.rate), s.cliUS, s.srvUS, s.allocs, perCall(s.evalsha),
				benchmarks.FormatDuration(s.p50), benchmarks.FormatDuration(s.p99), s.st.Allowed, s.st.Denied, s.st.Errors)
			fmt.Fprintf(log, "%s round %d %s: %s/s, client %.2f µs/decision\n",
				time.Now().Format("15:04:05"), r+1, o.targets[i].label, benchmarks.FormatRate(s.rate), s.cliUS)
		}
	}
	fmt.Fprintf(out, "\nLoad average after: %s.\n\n", loadAverage())
	fmt.Fprintln(out, "Medians over the rounds:")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| target | decisions/s | client CPU µs/decision | server CPU µs/decision | allocs/decision | decisions per EVALSHA |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|")
	for i, t := range o.targets {
		m := func(f func(sample) float64) float64 { return median(samples[i], f) }
		fmt.Fprintf(out, "| %s | %s | %.2f | %.2f | %.2f | %s |\n", t.label,
			benchmarks.FormatRate(m(func(s sample) float64 { return s.rate })),
			m(func(s sample) float64 { return s.cliUS }), m(func(s sample) float64 { return s.srvUS }),
			m(func(s sample) float64 { return s.allocs }), perCall(m(func(s sample) float64 { return s.evalsha })))
	}
	return ctx.Err()
}

// timed is one timed run of d, with the CPU time and allocations of this
// process and the server's CPU time and EVALSHA calls during it. For a
// floor it checks its own counts against the harness's and the server's.
func timed(ctx context.Context, o *options, admin *benchmarks.Admin, d benchmarks.Decider, keys []string) (sample, error) {
	f, isFloor := d.(*floor)
	var calls0, dec0 int64
	if isFloor {
		calls0, dec0 = f.counts()
	}
	srv0, err := admin.ServerCPU(ctx)
	if err != nil {
		return sample{}, err
	}
	ev0, err := evalshaCalls(ctx, admin)
	if err != nil {
		return sample{}, err
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	mallocs0 := ms.Mallocs
	cli0 := benchmarks.ProcessCPU()
	st := benchmarks.Run(ctx, d, benchmarks.Load{Concurrency: o.conc, Duration: o.duration, Keys: keys})
	cli := benchmarks.ProcessCPU() - cli0
	runtime.ReadMemStats(&ms)
	mallocs := ms.Mallocs - mallocs0
	srv1, err := admin.ServerCPU(ctx)
	if err != nil {
		return sample{}, err
	}
	ev1, err := evalshaCalls(ctx, admin)
	if err != nil {
		return sample{}, err
	}
	if st.Decisions == 0 {
		return sample{}, fmt.Errorf("no decision (%v)", st.FirstErr)
	}
	if st.Errors > 0 || st.Degraded > 0 {
		return sample{}, fmt.Errorf("%d errors and %d degraded decisions of %d: %v", st.Errors, st.Degraded, st.Decisions, st.FirstErr)
	}
	if isFloor {
		calls1, dec1 := f.counts()
		if dec1-dec0 != st.Decisions {
			return sample{}, fmt.Errorf("the floor answered %d decisions, the harness counted %d", dec1-dec0, st.Decisions)
		}
		if f.sends && calls1-calls0 != ev1-ev0 {
			return sample{}, fmt.Errorf("the floor sent %d calls, the server counted %d EVALSHA", calls1-calls0, ev1-ev0)
		}
	}
	n := float64(st.Decisions)
	return sample{
		rate:    st.Rate(),
		cliUS:   float64(cli) / 1e3 / n,
		srvUS:   float64(srv1-srv0) / 1e3 / n,
		allocs:  float64(mallocs) / n,
		evalsha: float64(ev1-ev0) / n,
		p50:     st.Latency.Quantile(0.5),
		p99:     st.Latency.Quantile(0.99),
		st:      st,
	}, nil
}

// evalshaCalls is the server's count of EVALSHA calls (INFO commandstats).
func evalshaCalls(ctx context.Context, admin *benchmarks.Admin) (int64, error) {
	info, err := admin.Info(ctx, "commandstats")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		v, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls=")
		if !ok {
			continue
		}
		v, _, _ = strings.Cut(v, ",")
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, nil // none yet
}

// perCall is decisions per EVALSHA from EVALSHA per decision.
func perCall(evalshaPerDecision float64) string {
	if evalshaPerDecision <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", 1/evalshaPerDecision)
}

// median is the median of f over ss (the mean of the middle two for an
// even count).
func median(ss []sample, f func(sample) float64) float64 {
	if len(ss) == 0 {
		return 0
	}
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = f(s)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// loadAverage is /proc/loadavg's 1, 5 and 15 minute load averages, or
// "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
