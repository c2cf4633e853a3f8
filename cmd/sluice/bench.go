package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/bits"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/store"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/valkey-io/valkey-go"
)

const benchUsage = `usage: sluice bench --valkey ADDR[,ADDR...] [flags]

Loads a Valkey (several addresses: a Valkey Cluster) with rate-limit
decisions through Sluice's Valkey store, as an application would: a number
of goroutines call AllowN in a loop on random keys for a fixed duration.
Prints a progress line per second to stderr, then decisions per second,
allowed, denied and degraded counts, latency percentiles, and the script
calls the servers ran meanwhile (INFO commandstats of every node, read
before and after: decisions per call and server time per decision).

The limit is -limit units per -window: a window's limit for the window
algorithms, a burst (capacity) of -limit refilled at -limit per -window for
gcra and token_bucket. Keys live under the prefix "sluice-bench" and expire
by themselves; nothing else on the server is touched. Compare with other
libraries in the benchmarks/ module.

flags:
`

// benchConfig is what a bench run does.
type benchConfig struct {
	addrs       []string
	policy      sluice.Policy
	algorithm   string
	concurrency int
	keys        int
	duration    time.Duration
	cost        int64
	timeout     time.Duration
	batching    int
	// username and passwordEnv (the environment variable holding the
	// password) authenticate to Valkey.
	username, passwordEnv string
}

// parseBench reads bench's flags. A nil config with a nil error means -h
// was asked for, and usage is printed on stdout.
func parseBench(args []string, stdout io.Writer) (*benchConfig, error) {
	fs := newFlags("bench")
	addrs := fs.String("valkey", "", "Valkey `addresses`, comma-separated (several: a cluster); required")
	alg := fs.String("algorithm", "gcra", "`algorithm`: gcra, token_bucket, fixed_window, sliding_window or sliding_log")
	limit := fs.Int64("limit", 1_000_000, "units per window; the burst or capacity for gcra and token_bucket")
	window := fs.Duration("window", time.Second, "the window, or the time to restore the whole limit for gcra and token_bucket")
	conc := fs.Int("concurrency", 64, "goroutines deciding at once")
	keys := fs.Int("keys", 10_000, "distinct keys, picked at random (1: one hot key)")
	duration := fs.Duration("duration", 10*time.Second, "how long to run")
	cost := fs.Int64("cost", 1, "units each decision takes")
	timeout := fs.Duration("timeout", sluice.DefaultTimeout, "decision timeout: decisions past it are degraded (decided by fail mode open)")
	batching := fs.Int("batching", 4, "script calls in flight, across the nodes of a cluster (valkeystore.WithBatching; 0: no batching)")
	username := fs.String("username", "", "Valkey ACL `user` (default: the default user)")
	passwordEnv := fs.String("password-env", "", "the environment `variable` holding Valkey's password")
	if help, err := parseBenchFlags(fs, args, stdout); help || err != nil {
		return nil, err
	}
	c := &benchConfig{algorithm: *alg, concurrency: *conc, keys: *keys, duration: *duration, cost: *cost, timeout: *timeout, batching: *batching,
		username: *username, passwordEnv: *passwordEnv, addrs: splitAddrs(*addrs)}
	if err := c.check(); err != nil {
		return nil, err
	}
	var err error
	if c.policy, err = benchPolicy(*alg, *limit, *window); err != nil {
		return nil, err
	}
	return c, nil
}

// parseBenchFlags parses bench's flags; help is true when -h was asked
// for (usage is then printed on stdout), and no argument may remain.
func parseBenchFlags(fs *flag.FlagSet, args []string, stdout io.Writer) (help bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(fs, benchUsage, stdout)
			return true, nil
		}
		return false, err
	}
	if fs.NArg() > 0 {
		return false, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return false, nil
}

// check refuses a bench run without an address or with a count out of
// range.
func (c *benchConfig) check() error {
	switch {
	case len(c.addrs) == 0:
		return errors.New("--valkey: an address is required")
	case c.concurrency < 1:
		return fmt.Errorf("--concurrency must be at least 1, got %d", c.concurrency)
	case c.keys < 1:
		return fmt.Errorf("--keys must be at least 1, got %d", c.keys)
	case c.duration <= 0:
		return fmt.Errorf("--duration must be positive, got %v", c.duration)
	case c.cost < 0:
		return fmt.Errorf("--cost must not be negative, got %d", c.cost)
	case c.batching < 0:
		return fmt.Errorf("--batching must not be negative, got %d", c.batching)
	}
	return nil
}

// benchPolicy is the policy of algorithm alg allowing limit units per
// window (for the rated algorithms: a burst of limit, refilled at limit
// per window).
func benchPolicy(alg string, limit int64, window time.Duration) (sluice.Policy, error) {
	a, err := driver.ParseAlgorithm(alg)
	if err != nil {
		return nil, fmt.Errorf("--algorithm: %w", err)
	}
	params := driver.Params{Limit: limit, Window: window}
	if a.Rated() { // limit per window
		params = driver.Params{Limit: limit, Rate: float64(limit), Per: window}
	}
	return sluice.PolicyOf(a, params)
}

// runBench is "sluice bench": see benchUsage.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseBench(args, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "sluice bench: %v\nRun \"sluice bench -h\" for usage.\n", err)
		return 2
	}
	if cfg == nil {
		return 0
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()

	conn, code := openBenchStore(ctx, cfg, stderr)
	if conn == nil {
		return code
	}
	defer conn.Close()
	lim, err := newBenchLimiter(conn, cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "sluice bench: %v\n", err)
		return 2
	}
	fmt.Fprintf(stdout, "sluice bench: %v on %s (%s), %d goroutines, %d keys, cost %d, %v\n",
		lim.Rule(), strings.Join(cfg.addrs, ","), benchMode(conn.Client), cfg.concurrency, cfg.keys, cfg.cost, cfg.duration)
	decided, err := benchMeasured(ctx, conn.Client, lim, cfg, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "sluice bench: %v\n", err)
		return 1
	}
	return benchExit(ctx, decided, stderr)
}

// newBenchLimiter is the limiter bench decides with: cfg's policy under
// the prefix sluice-bench, logging to stderr.
func newBenchLimiter(conn *store.Conn, cfg *benchConfig, stderr io.Writer) (*sluice.Limiter, error) {
	return sluice.New(conn.Store, cfg.policy,
		sluice.WithPrefix("sluice-bench"), sluice.WithName("bench-"+cfg.algorithm), sluice.WithTimeout(cfg.timeout),
		sluice.WithLogger(slog.New(slog.NewTextHandler(stderr, nil))))
}

// benchMode names client's deployment: standalone, or a cluster and its
// number of nodes.
func benchMode(client valkey.Client) string {
	if client.Mode() == valkey.ClientModeCluster {
		return fmt.Sprintf("cluster, %d nodes", len(client.Nodes()))
	}
	return "standalone"
}

// benchMeasured runs the load between two reads of the servers' script
// statistics, prints the report on stdout and returns the decisions
// Valkey made.
func benchMeasured(ctx context.Context, client valkey.Client, lim *sluice.Limiter, cfg *benchConfig, stdout, stderr io.Writer) (int64, error) {
	before, err := readScriptStats(ctx, client)
	if err != nil {
		return 0, err
	}
	tot := benchLoad(ctx, lim, cfg, stderr)
	after, err := readScriptStats(ctx, client)
	if err != nil {
		return 0, err
	}
	return printBenchReport(stdout, cfg, tot, before, after), nil
}

// benchExit is bench's exit code once the report is printed: 1 when the
// run was interrupted or Valkey made no decision.
func benchExit(ctx context.Context, decided int64, stderr io.Writer) int {
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "sluice bench: interrupted")
		return 1
	}
	if decided == 0 {
		fmt.Fprintln(stderr, "sluice bench: Valkey made no decision")
		return 1
	}
	return 0
}

// openBenchStore connects to the Valkey of cfg with the client sluice
// serve decides with (store.ClientOption: pipelining every call, no
// retries, serve's timeouts), so that the numbers are the service's; only
// the credentials come from flags. A nil Conn and the exit code when it
// cannot.
func openBenchStore(ctx context.Context, cfg *benchConfig, stderr io.Writer) (*store.Conn, int) {
	if cfg.passwordEnv != "" {
		if _, ok := os.LookupEnv(cfg.passwordEnv); !ok {
			fmt.Fprintf(stderr, "sluice bench: --password-env: environment variable %s is not set\n", cfg.passwordEnv)
			return nil, 2
		}
	}
	v := &config.Valkey{Addresses: cfg.addrs, Username: cfg.username, PasswordEnv: cfg.passwordEnv, ConnectTimeout: config.DefaultConnectTimeout}
	conn, err := store.Open(ctx, v, os.LookupEnv, store.WithClientName("sluice-bench"),
		store.WithStoreOptions(valkeystore.WithBatching(cfg.batching)),
		store.WithExplain(func(err error) error { return benchAuthHint(err, cfg) }))
	if err != nil {
		fmt.Fprintf(stderr, "sluice bench: %v\n", err)
		return nil, 1
	}
	return conn, 0
}

// printBenchReport writes the run's tally, script statistics and
// latencies, and returns the decisions Valkey made.
func printBenchReport(w io.Writer, cfg *benchConfig, tot *benchWorker, before, after scriptStats) int64 {
	secs := tot.elapsed.Seconds()
	decided := tot.allowed + tot.denied
	fmt.Fprintf(w, "decisions   %d in %.2fs: %s/s (degraded and errors excluded)\n", decided, secs, benchThousands(float64(decided)/secs))
	fmt.Fprintf(w, "allowed     %d\n", tot.allowed)
	fmt.Fprintf(w, "denied      %d\n", tot.denied)
	fmt.Fprintf(w, "degraded    %d (decided without Valkey: timeout %v, fail open)\n", tot.degraded, cfg.timeout)
	if tot.errors > 0 {
		fmt.Fprintf(w, "errors      %d (first: %v)\n", tot.errors, tot.firstErr)
	}
	// Every script call of the run, whatever its outcome, from the
	// servers' INFO commandstats (other clients' calls meanwhile included).
	calls, usec := after.calls-before.calls, after.usec-before.usec
	if sent := decided + tot.degraded; calls > 0 && sent > 0 {
		fmt.Fprintf(w, "scripts     %d calls: %.2f decisions per call, %.2f µs of server time per decision, %.1f per call\n",
			calls, float64(sent)/float64(calls), float64(usec)/float64(sent), float64(usec)/float64(calls))
	}
	h := &tot.latency
	fmt.Fprintf(w, "latency     p50 %v  p99 %v  p99.9 %v  max %v\n",
		benchRound(h.quantile(0.50)), benchRound(h.quantile(0.99)), benchRound(h.quantile(0.999)), benchRound(h.max))
	return decided
}

// benchWorker is one goroutine's tally. done is read by the progress
// reporter; the rest only after the workers have stopped.
type benchWorker struct {
	done     atomic.Int64
	_        [56]byte // keep each worker's counter on its own cache line
	allowed  int64
	denied   int64
	degraded int64
	errors   int64
	firstErr error
	elapsed  time.Duration
	latency  benchHist
}

// benchLoad runs the workers for cfg.duration (or until ctx ends), printing
// a progress line to progress every second, and returns their sum.
func benchLoad(ctx context.Context, lim *sluice.Limiter, cfg *benchConfig, progress io.Writer) *benchWorker {
	keys := make([]string, cfg.keys)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	var stop atomic.Bool
	workers := make([]*benchWorker, cfg.concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range workers {
		w := &benchWorker{}
		workers[i] = w
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			w.run(ctx, lim, keys, cfg.cost, &stop, seed)
		}(uint64(i) + 1)
	}
	// The decisions in flight at the end finish normally: ending them by
	// a deadline would make them look like store timeouts.
	p := benchProgress{w: progress, workers: workers, start: start, lastAt: start}
	p.until(ctx, cfg.duration)
	stop.Store(true)
	wg.Wait()
	p.line(time.Now(), "  done")
	return sumWorkers(workers, time.Since(start))
}

// run decides on random keys of keys until stop is set, tallying each
// outcome and its latency.
func (w *benchWorker) run(ctx context.Context, lim *sluice.Limiter, keys []string, cost int64, stop *atomic.Bool, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0xb3))
	for !stop.Load() {
		key := pickKey(rng, keys)
		t0 := time.Now()
		res, err := lim.AllowN(ctx, key, cost)
		if err != nil && ctx.Err() != nil {
			break // interrupted mid-decision: not a failure
		}
		w.latency.record(time.Since(t0))
		w.tally(res, err)
		w.done.Add(1)
	}
}

// pickKey is one of keys at random (the one, without drawing, when
// there is one).
func pickKey(rng *rand.Rand, keys []string) string {
	if len(keys) > 1 {
		return keys[rng.IntN(len(keys))]
	}
	return keys[0]
}

// tally counts one decision's outcome: an error (the first kept), a
// degraded decision, an allowed or a denied one.
func (w *benchWorker) tally(res sluice.Result, err error) {
	switch {
	case err != nil:
		w.errors++
		if w.firstErr == nil {
			w.firstErr = err
		}
	case res.Degraded:
		w.degraded++
	case res.Allowed:
		w.allowed++
	default:
		w.denied++
	}
}

// benchProgress prints the decisions the workers have made so far, and
// their rate since the last line.
type benchProgress struct {
	w       io.Writer
	workers []*benchWorker
	start   time.Time
	last    int64
	lastAt  time.Time
}

// until prints a line every second for d, or until ctx ends.
func (p *benchProgress) until(ctx context.Context, d time.Duration) {
	end := time.NewTimer(d)
	defer end.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-end.C:
			return
		case <-ctx.Done():
			return
		case now := <-tick.C:
			p.line(now, "")
		}
	}
}

// line prints the progress at now, followed by suffix.
func (p *benchProgress) line(now time.Time, suffix string) {
	var n int64
	for _, w := range p.workers {
		n += w.done.Load()
	}
	fmt.Fprintf(p.w, "%5.1fs  %12d decisions  %10s/s%s\n",
		now.Sub(p.start).Seconds(), n, benchThousands(float64(n-p.last)/now.Sub(p.lastAt).Seconds()), suffix)
	p.last, p.lastAt = n, now
}

// sumWorkers adds up the workers' tallies.
func sumWorkers(workers []*benchWorker, elapsed time.Duration) *benchWorker {
	tot := &benchWorker{elapsed: elapsed}
	for _, w := range workers {
		tot.allowed += w.allowed
		tot.denied += w.denied
		tot.degraded += w.degraded
		tot.errors += w.errors
		if tot.firstErr == nil {
			tot.firstErr = w.firstErr
		}
		tot.latency.merge(&w.latency)
	}
	return tot
}

// benchHist records durations in log-linear buckets: exact below 64ns, then
// 32 buckets per power of two (at most 3% error). One per goroutine.
type benchHist struct {
	counts [64 * 32]uint64
	n      uint64
	max    time.Duration
}

func (h *benchHist) record(d time.Duration) {
	v := uint64(max(d, 0))
	i := int(v)
	if v >= 64 {
		e := bits.Len64(v) - 6
		i = (e+1)*32 + int(v>>e) - 32
	}
	h.counts[i]++
	h.n++
	h.max = max(h.max, d)
}

func (h *benchHist) merge(o *benchHist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile returns the middle of the bucket holding the q-th duration.
func (h *benchHist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := max(uint64(q*float64(h.n)+0.5), 1)
	var seen uint64
	for i, c := range h.counts {
		if seen += c; seen < rank {
			continue
		}
		if i < 64 {
			return time.Duration(i)
		}
		e := i/32 - 1
		lo := uint64(i%32+32) << e
		return min(time.Duration(lo+(uint64(1)<<e)/2), h.max)
	}
	return h.max
}

// benchRound rounds d for display: 1.234ms, 85.3µs.
func benchRound(d time.Duration) time.Duration {
	switch {
	case d >= time.Millisecond:
		return d.Round(time.Microsecond)
	case d >= time.Microsecond:
		return d.Round(100 * time.Nanosecond)
	}
	return d
}

// benchThousands prints n rounded, with thousands separators.
func benchThousands(n float64) string {
	s := strconv.FormatInt(int64(n+0.5), 10)
	var b strings.Builder
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// benchAuthHint names the flags that fix Valkey's refusal to authenticate
// (NOAUTH, WRONGPASS); other errors are returned as they are.
func benchAuthHint(err error, cfg *benchConfig) error {
	switch store.AuthRefusal(err) {
	case "NOAUTH":
		return fmt.Errorf("valkey requires a password and none was sent (NOAUTH): pass --password-env with the name of an environment variable holding it (and --username for an ACL user): %w", err)
	case "WRONGPASS":
		src := "no password (--password-env not set)"
		if cfg.passwordEnv != "" {
			src = "the password in $" + cfg.passwordEnv + " (--password-env)"
		}
		user := "the default user (--username not set)"
		if cfg.username != "" {
			user = fmt.Sprintf("user %q (--username)", cfg.username)
		}
		return fmt.Errorf("valkey refused %s for %s (WRONGPASS): fix --password-env or --username: %w", src, user, err)
	}
	return err
}
