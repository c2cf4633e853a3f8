// Command grantbench measures grants (sluice.WithGrants) on one hot key
// shared by several OS processes on one Valkey it starts: the same run
// with and without grants, reporting decisions per second, decisions per
// Valkey script call (INFO commandstats: EVALSHA and EVAL calls) and, for a
// limit below the demand, the under-admission against the exact policy
// and the bound of docs/grants.md.
//
//	grantbench -procs 4,8 -duration 3s -rate 50000 -burst 50000
//
// Each process runs -conc goroutines deciding as fast as they can; the
// demand is above the limit unless -rate is higher than the processes can
// decide.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/benchmarks"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/valkey-io/valkey-go"
)

func main() {
	var err error
	if os.Getenv("GRANTBENCH_CHILD") != "" {
		err = child(os.Stdout)
	} else {
		err = run(os.Args[1:], os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "grantbench:", err)
		os.Exit(1)
	}
}

type config struct {
	procs    []int
	conc     int
	dur      time.Duration
	rate     float64
	burst    int64
	life     time.Duration
	rounds   int
	addr     string
	algoName string
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("grantbench", flag.ContinueOnError)
	procs := fs.String("procs", "4,8", "processes sharing the key")
	c := config{}
	fs.IntVar(&c.conc, "conc", 16, "goroutines per process")
	fs.DurationVar(&c.dur, "duration", 3*time.Second, "each run")
	fs.Float64Var(&c.rate, "rate", 50000, "the policy's rate per second")
	fs.Int64Var(&c.burst, "burst", 50000, "the policy's burst (capacity)")
	fs.DurationVar(&c.life, "life", 2*time.Second, "GrantOptions.Life")
	fs.IntVar(&c.rounds, "rounds", 1, "rounds, with and without grants alternating")
	fs.StringVar(&c.addr, "addr", "", "a dedicated Valkey instead of starting one")
	fs.StringVar(&c.algoName, "algorithm", "gcra", "gcra or token_bucket")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, s := range strings.Split(*procs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("bad -procs %q", s)
		}
		c.procs = append(c.procs, n)
	}
	if c.addr == "" {
		srv, err := benchmarks.StartServer()
		if err != nil {
			return err
		}
		defer srv.Stop()
		c.addr = srv.Addr
	}
	admin, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{c.addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		return err
	}
	defer admin.Close()
	fmt.Fprintf(out, "policy: %s rate %.0f/s burst %d; %d goroutines per process; %v runs; grant life %v\n\n", c.algoName, c.rate, c.burst, c.conc, c.dur, c.life)
	fmt.Fprintln(out, "| grants | procs | decisions/s | allowed/s | script calls | decisions per call | exact | admitted | under | bound | grant calls | expired |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for r := 0; r < c.rounds; r++ {
		for _, n := range c.procs {
			for _, grants := range []bool{false, true} {
				row, err := measure(admin, c, n, grants)
				if err != nil {
					return err
				}
				fmt.Fprintln(out, row)
			}
		}
	}
	return nil
}

// measure runs n processes, with or without grants, and formats the row.
func measure(admin valkey.Client, c config, n int, grants bool) (string, error) {
	ctx := context.Background()
	if err := admin.Do(ctx, admin.B().Flushall().Build()).Error(); err != nil {
		return "", err
	}
	if err := admin.Do(ctx, admin.B().ConfigResetstat().Build()).Error(); err != nil {
		return "", err
	}
	start := time.Now().Add(500 * time.Millisecond)
	var decisions, allowed, gcalls, expired atomic.Int64
	var first, last atomic.Int64
	first.Store(1 << 62)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "GRANTBENCH_CHILD=1", "GB_ADDR="+c.addr, "GB_START="+strconv.FormatInt(start.UnixNano(), 10),
			"GB_DUR="+c.dur.String(), "GB_CONC="+strconv.Itoa(c.conc), "GB_RATE="+strconv.FormatFloat(c.rate, 'g', -1, 64),
			"GB_BURST="+strconv.FormatInt(c.burst, 10), "GB_GRANTS="+strconv.FormatBool(grants), "GB_LIFE="+c.life.String(), "GB_ALG="+c.algoName)
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return "", err
		}
		if err := cmd.Start(); err != nil {
			return "", err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				var d, a, gc, ex, f, l int64
				if _, err := fmt.Sscanf(sc.Text(), "RESULT %d %d %d %d %d %d", &d, &a, &gc, &ex, &f, &l); err == nil {
					decisions.Add(d)
					allowed.Add(a)
					gcalls.Add(gc)
					expired.Add(ex)
					for v := first.Load(); f < v && !first.CompareAndSwap(v, f); v = first.Load() {
					}
					for v := last.Load(); l > v && !last.CompareAndSwap(v, l); v = last.Load() {
					}
				}
			}
			if err := cmd.Wait(); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return "", fmt.Errorf("a child: %w", err)
	}
	calls, err := scriptCalls(admin)
	if err != nil {
		return "", err
	}
	secs := c.dur.Seconds()
	// The exact policy fed the same saturating demand admits the burst and
	// the rate over the span from the first decision to the last.
	span := time.Duration(last.Load() - first.Load())
	exact := min(decisions.Load(), c.burst+int64(c.rate*span.Seconds()))
	under := exact - allowed.Load()
	bound := c.burst + expired.Load()
	return fmt.Sprintf("| %v | %d | %.0f | %.0f | %d | %.1f | %d | %d | %d | %d | %d | %d |", grants, n,
		float64(decisions.Load())/secs, float64(allowed.Load())/secs, calls, float64(decisions.Load())/float64(max(calls, 1)),
		exact, allowed.Load(), under, bound, gcalls.Load(), expired.Load()), nil
}

// scriptCalls reads the EVALSHA and EVAL calls since the stats were reset.
func scriptCalls(admin valkey.Client) (int64, error) {
	info, err := admin.Do(context.Background(), admin.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			if rest, ok := strings.CutPrefix(line, cmd); ok {
				for _, f := range strings.Split(rest, ",") {
					if v, ok := strings.CutPrefix(f, "calls="); ok {
						c, _ := strconv.ParseInt(v, 10, 64)
						n += c
					}
				}
			}
		}
	}
	return n, nil
}

// child is one process: conc goroutines deciding on one key from the
// start time for the duration, then one line of results.
func child(out io.Writer) error {
	env := os.Getenv
	startNs, _ := strconv.ParseInt(env("GB_START"), 10, 64)
	dur, _ := time.ParseDuration(env("GB_DUR"))
	conc, _ := strconv.Atoi(env("GB_CONC"))
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{env("GB_ADDR")}, AlwaysPipelining: true})
	if err != nil {
		return err
	}
	defer client.Close()
	l, err := childLimiter(client)
	if err != nil {
		return err
	}
	ctx := context.Background()
	// Warm the connection and the script cache before the clock starts.
	if _, err := l.Allow(ctx, "warm"); err != nil {
		return err
	}
	start := time.Unix(0, startNs)
	time.Sleep(time.Until(start))
	var t tally
	t.first.Store(1 << 62)
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.work(ctx, l, start, dur)
		}()
	}
	wg.Wait()
	if t.degraded.Load() > 0 {
		return fmt.Errorf("%d decisions degraded (the store did not answer within the timeout)", t.degraded.Load())
	}
	s := l.GrantStats()
	_ = l.Close()
	fmt.Fprintf(out, "RESULT %d %d %d %d %d %d\n", t.decisions.Load(), t.allowed.Load(), s.Calls, s.Expired, t.first.Load(), t.last.Load())
	return nil
}

// childLimiter is the limiter of a child, from its environment.
func childLimiter(client valkey.Client) (*sluice.Limiter, error) {
	env := os.Getenv
	rate, _ := strconv.ParseFloat(env("GB_RATE"), 64)
	burst, _ := strconv.ParseInt(env("GB_BURST"), 10, 64)
	life, _ := time.ParseDuration(env("GB_LIFE"))
	store, err := valkeystore.New(client)
	if err != nil {
		return nil, err
	}
	var pol sluice.Policy = sluice.GCRA{Rate: rate, Per: time.Second, Burst: burst}
	if env("GB_ALG") == "token_bucket" {
		pol = sluice.TokenBucket{Capacity: burst, Rate: rate, Per: time.Second}
	}
	opts := []sluice.Option{sluice.WithName("hot"), sluice.WithTimeout(time.Second)}
	if env("GB_GRANTS") == "true" {
		opts = append(opts, sluice.WithGrants(sluice.GrantOptions{Life: life}))
	}
	return sluice.New(store, pol, opts...)
}

// tally is what a child's goroutines decided.
type tally struct {
	decisions, allowed, degraded, first, last atomic.Int64
}

// work decides as fast as it can from start for dur.
func (t *tally) work(ctx context.Context, l *sluice.Limiter, start time.Time, dur time.Duration) {
	var d, a int64
	f := time.Now().UnixNano()
	for time.Since(start) < dur {
		res, err := l.Allow(ctx, "k")
		if err != nil {
			panic(err)
		}
		d++
		if res.Degraded {
			t.degraded.Add(1)
		} else if res.Allowed {
			a++
		}
	}
	t.decisions.Add(d)
	t.allowed.Add(a)
	for v := t.first.Load(); f < v && !t.first.CompareAndSwap(v, f); v = t.first.Load() {
	}
	now := time.Now().UnixNano()
	for v := t.last.Load(); now > v && !t.last.CompareAndSwap(v, now); v = t.last.Load() {
	}
}
