// Command wirestats runs targets of the comparison one after the other
// against one Valkey it starts, and prints per decision what the server
// saw: reads and writes processed (INFO stats total_reads_processed,
// total_writes_processed), bytes in and out (total_net_input_bytes,
// total_net_output_bytes), commands by name and their time
// (INFO commandstats), the server's CPU time split into user and system
// (INFO cpu), and the client's CPU time (getrusage). It is how the
// server's extra cost of a serial Sluice decision was traced to the
// script's own time, not to more reads, writes or commands
// (benchmarks/history/2026-11-30-benchmarks.md, "One goroutine: where the
// server's time goes").
//
//	wirestats -targets sluice/gcra,valkeylimiter -conc 1,16 -duration 3s -rounds 2
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/benchmarks"
	"github.com/valkey-io/valkey-go"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "wirestats:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("wirestats", flag.ContinueOnError)
	list := fs.String("targets", "sluice/gcra,valkeylimiter", "targets, as for compare")
	concs := fs.String("conc", "1,16", "goroutines")
	dur := fs.Duration("duration", 3*time.Second, "each run")
	rounds := fs.Int("rounds", 2, "rounds, the targets alternating")
	hot := fs.Bool("hot", false, "one hot key instead of -keys keys")
	nkeys := fs.Int("keys", 100_000, "keys, each prepared before timing")
	addr := fs.String("addr", "", "a dedicated Valkey (FLUSHALLed) instead of starting one")
	timeout := fs.Duration("call-timeout", 0, "give every peer's call a context with this timeout (0: none), as Sluice's calls have")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 || *dur <= 0 || *rounds < 1 || *nkeys < 1 || *timeout < 0 {
		return fmt.Errorf("bad arguments (see -h)")
	}
	return measure(out, *list, *concs, *dur, *rounds, *hot, *nkeys, *addr, *timeout)
}

func measure(out io.Writer, list, concs string, dur time.Duration, rounds int, hot bool, nkeys int, addr string, callTimeout time.Duration) error {
	ts, err := benchmarks.Targets(list)
	if err != nil {
		return err
	}
	var cs []int
	for _, s := range strings.Split(concs, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || c < 1 {
			return fmt.Errorf("bad -conc %q", s)
		}
		cs = append(cs, c)
	}
	if addr == "" {
		srv, err := benchmarks.StartServer()
		if err != nil {
			return err
		}
		defer srv.Stop()
		addr = srv.Addr
	}
	admin, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		return err
	}
	defer admin.Close()
	ctx := context.Background()
	if err := admin.Do(ctx, admin.B().Flushall().Sync().Build()).Error(); err != nil {
		return err
	}
	prof := benchmarks.Spread
	keys := benchmarks.MakeKeys(nkeys)
	if hot {
		prof = benchmarks.Hot
	}
	ds := make([]benchmarks.Decider, len(ts))
	for i, t := range ts {
		d, err := t.Open(benchmarks.Config{Addr: addr, Profile: prof, SluiceTimeout: time.Second})
		if err != nil {
			return fmt.Errorf("%s: %w", t.Label(), err)
		}
		defer d.Close()
		if callTimeout > 0 && t.Name != "sluice" {
			d = timeoutDecider{d, callTimeout}
		}
		ds[i] = d
		if hot {
			continue
		}
		if _, err := benchmarks.Prepare(ctx, d, keys, 16); err != nil {
			return fmt.Errorf("%s: prepare: %w", t.Label(), err)
		}
	}
	fmt.Fprintf(out, "| target | conc | decisions/s | reads/dec | writes/dec | bytes in/dec | bytes out/dec | commands/dec | script µs/call | server user µs/dec | server sys µs/dec | client µs/dec |\n")
	fmt.Fprintf(out, "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|\n")
	for r := 0; r < rounds; r++ {
		for _, c := range cs {
			for k := range ts {
				i := (k + r) % len(ts)
				runKeys := keys
				if hot {
					runKeys = []string{"hot-" + strconv.Itoa(r) + "-" + strconv.Itoa(c)}
				}
				before, err := snapshot(ctx, admin)
				if err != nil {
					return err
				}
				cli0 := benchmarks.ProcessCPU()
				st := benchmarks.Run(ctx, ds[i], benchmarks.Load{Concurrency: c, Duration: dur, Keys: runKeys})
				cli := benchmarks.ProcessCPU() - cli0
				after, err := snapshot(ctx, admin)
				if err != nil {
					return err
				}
				n := float64(st.Allowed + st.Denied)
				if n == 0 {
					return fmt.Errorf("%s: no decisions (%v)", ts[i].Label(), st.FirstErr)
				}
				per := func(f string) float64 { return (after.n[f] - before.n[f]) / n }
				var cmds []string
				scriptCalls, scriptUsec := 0.0, 0.0
				for name, calls := range after.calls {
					d := calls - before.calls[name]
					if d <= 0 || name == "info" {
						continue
					}
					cmds = append(cmds, fmt.Sprintf("%s %.2f", name, d/n))
					if name == "evalsha" || name == "eval" {
						scriptCalls += d
						scriptUsec += after.usec[name] - before.usec[name]
					}
				}
				slices.Sort(cmds)
				perCall := 0.0
				if scriptCalls > 0 {
					perCall = scriptUsec / scriptCalls
				}
				fmt.Fprintf(out, "| %s | %d | %.0f | %.2f | %.2f | %.0f | %.0f | %s | %.1f | %.1f | %.1f | %.1f |\n",
					ts[i].Label(), c, st.Rate(), per("total_reads_processed"), per("total_writes_processed"),
					per("total_net_input_bytes"), per("total_net_output_bytes"), strings.Join(cmds, ", "), perCall,
					per("used_cpu_user")*1e6, per("used_cpu_sys")*1e6, float64(cli.Microseconds())/n)
			}
		}
	}
	return nil
}

// stats is one reading of INFO stats, cpu and commandstats.
type stats struct {
	n     map[string]float64 // numeric fields of stats and cpu
	calls map[string]float64 // commandstats: calls by command
	usec  map[string]float64 // commandstats: usec by command
}

func snapshot(ctx context.Context, c valkey.Client) (stats, error) {
	s := stats{n: map[string]float64{}, calls: map[string]float64{}, usec: map[string]float64{}}
	for _, sec := range []string{"stats", "cpu", "commandstats"} {
		info, err := c.Do(ctx, c.B().Info().Section(sec).Build()).ToString()
		if err != nil {
			return s, err
		}
		for _, line := range strings.Split(info, "\r\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			if name, ok := strings.CutPrefix(k, "cmdstat_"); ok {
				for _, f := range strings.Split(v, ",") {
					fk, fv, _ := strings.Cut(f, "=")
					x, _ := strconv.ParseFloat(fv, 64)
					switch fk {
					case "calls":
						s.calls[name] = x
					case "usec":
						s.usec[name] = x
					}
				}
				continue
			}
			if x, err := strconv.ParseFloat(v, 64); err == nil {
				s.n[k] = x
			}
		}
	}
	return s, nil
}

// timeoutDecider gives each call a context with a timeout.
type timeoutDecider struct {
	benchmarks.Decider
	timeout time.Duration
}

func (d timeoutDecider) Allow(ctx context.Context, key string) (benchmarks.Outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	return d.Decider.Allow(ctx, key)
}
