package verify

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/store"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/valkey-io/valkey-go"
)

// WorkerEnv is set to "1" in the environment of the worker processes that
// the concurrency check starts. A program that calls Run must, when it
// finds WorkerEnv set, call ServeWorker instead of doing its usual work
// (sluice does; so do the tests that call Run).
const WorkerEnv = "SLUICE_VERIFY_WORKER"

// job is what a worker is told on its standard input, as one JSON line.
type job struct {
	Valkey config.Valkey `json:"valkey"`
	// Password is the Valkey password, already read from where the
	// configuration says (it never goes on a command line).
	Password string `json:"password,omitempty"`
	// SentinelPassword is the Sentinels' password, read the same way.
	SentinelPassword string     `json:"sentinel_password,omitempty"`
	Prefix           string     `json:"prefix"`
	Limiter          string     `json:"limiter"`
	Policy           wirePolicy `json:"policy"`
	Identity         string     `json:"identity"`
	AtMicro          int64      `json:"at_us"`
	Attempts         int64      `json:"attempts"`
	Goroutines       int        `json:"goroutines"`
	// Mode is what the job does: "" decides Attempts times at AtMicro
	// (the rate checks); "hold" holds leases for up to HoldMicro each,
	// again and again for RunMicro, and reports each span held; "take"
	// takes Attempts leases and keeps them (the crash check then kills
	// the worker).
	Mode      string `json:"mode,omitempty"`
	RunMicro  int64  `json:"run_us,omitempty"`
	HoldMicro int64  `json:"hold_us,omitempty"`
}

// wirePolicy carries a sluice.Policy: exactly one field is set.
type wirePolicy struct {
	FixedWindow   *sluice.FixedWindow   `json:"fixed_window,omitempty"`
	SlidingLog    *sluice.SlidingLog    `json:"sliding_log,omitempty"`
	SlidingWindow *sluice.SlidingWindow `json:"sliding_window,omitempty"`
	TokenBucket   *sluice.TokenBucket   `json:"token_bucket,omitempty"`
	GCRA          *sluice.GCRA          `json:"gcra,omitempty"`
	InFlight      *sluice.InFlight      `json:"in_flight,omitempty"`
}

func toWire(p sluice.Policy) (wirePolicy, error) {
	var w wirePolicy
	switch p := p.(type) {
	case sluice.FixedWindow:
		w.FixedWindow = &p
	case sluice.SlidingLog:
		w.SlidingLog = &p
	case sluice.SlidingWindow:
		w.SlidingWindow = &p
	case sluice.TokenBucket:
		w.TokenBucket = &p
	case sluice.GCRA:
		w.GCRA = &p
	case sluice.InFlight:
		w.InFlight = &p
	default:
		return w, fmt.Errorf("verify: cannot send a policy of type %T to a worker", p)
	}
	return w, nil
}

func (w wirePolicy) policy() (sluice.Policy, error) {
	switch {
	case w.FixedWindow != nil:
		return *w.FixedWindow, nil
	case w.SlidingLog != nil:
		return *w.SlidingLog, nil
	case w.SlidingWindow != nil:
		return *w.SlidingWindow, nil
	case w.TokenBucket != nil:
		return *w.TokenBucket, nil
	case w.GCRA != nil:
		return *w.GCRA, nil
	case w.InFlight != nil:
		return *w.InFlight, nil
	}
	return nil, errors.New("verify: the job carries no policy")
}

// tally is a worker's answer, one JSON line on its standard output.
type tally struct {
	Allowed    int64  `json:"allowed"`
	Refused    int64  `json:"refused"`
	Degraded   int64  `json:"degraded"`
	Errors     int64  `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// Error is set when the worker could not run at all.
	Error string `json:"error,omitempty"`
	// Spans are the leases a "hold" job held, each from just after its
	// Acquire returned to just before its Release was sent (Unix
	// nanoseconds); Lost counts the releases that freed nothing (the
	// lease had ended already).
	Spans [][2]int64 `json:"spans,omitempty"`
	Lost  int64      `json:"lost,omitempty"`
	// SentNano and HeldNano bracket a "take" job's acquires: before the
	// first was sent, after the last returned.
	SentNano int64 `json:"sent_ns,omitempty"`
	HeldNano int64 `json:"held_ns,omitempty"`
}

// selfWorker starts this executable again as a worker.
func selfWorker(ctx context.Context) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), WorkerEnv+"=1")
	return cmd
}

// ServeWorker is the worker side of the concurrency check. For each job it
// reads from in (one JSON line each, until in ends), it connects (once),
// says it is ready, waits for the word to go, makes its share of decisions
// from many goroutines, and writes the tally to out.
func ServeWorker(ctx context.Context, in io.Reader, out io.Writer) error {
	ws := &workerSession{rd: bufio.NewReader(in), enc: json.NewEncoder(out)}
	defer ws.close()
	for {
		j, more, err := readJob(ws.rd)
		if !more {
			return err
		}
		if err := ws.serve(ctx, j); err != nil {
			return err
		}
	}
}

// workerSession is a worker's side of its pipes, and its connection to
// Valkey once the first job made it.
type workerSession struct {
	rd   *bufio.Reader
	enc  *json.Encoder
	conn *workerConn
}

// serve runs job j, connecting first on the first job, and writes its
// tally.
func (ws *workerSession) serve(ctx context.Context, j job) error {
	if err := ws.connect(ctx, j); err != nil {
		return err
	}
	t, err := ws.conn.work(ctx, j, ws.ready)
	if err != nil {
		t.Error = err.Error()
	}
	return ws.enc.Encode(t)
}

// connect connects to the Valkey of j unless connected already; a worker
// that cannot says so in a tally, and stops.
func (ws *workerSession) connect(ctx context.Context, j job) error {
	if ws.conn != nil {
		return nil
	}
	conn, err := dialWorker(ctx, j)
	if err != nil {
		if err := ws.enc.Encode(tally{Error: err.Error()}); err != nil {
			return err
		}
		return err
	}
	ws.conn = conn
	return nil
}

// ready says the worker is ready and waits for the word to go.
func (ws *workerSession) ready() error {
	if err := ws.enc.Encode(map[string]bool{"ready": true}); err != nil {
		return err
	}
	_, err := ws.rd.ReadBytes('\n')
	return err
}

// close closes the connection to Valkey, if any.
func (ws *workerSession) close() {
	if ws.conn != nil {
		ws.conn.client.Close()
	}
}

// readJob reads the next job line from rd; more is false, with a nil
// error, when rd ended before another job began, and false with the
// error when reading or decoding the line failed.
func readJob(rd *bufio.Reader) (j job, more bool, err error) {
	line, err := rd.ReadBytes('\n')
	if err == io.EOF && len(line) == 0 {
		return job{}, false, nil
	}
	if err != nil {
		return job{}, false, fmt.Errorf("verify worker: reading a job: %w", err)
	}
	if err := json.Unmarshal(line, &j); err != nil {
		return job{}, false, fmt.Errorf("verify worker: bad job: %w", err)
	}
	return j, true, nil
}

// workerConn is a worker's connection to Valkey, kept across jobs.
type workerConn struct {
	client valkey.Client
	store  *valkeystore.Store
}

func dialWorker(ctx context.Context, j job) (*workerConn, error) {
	v := j.Valkey
	v.PasswordEnv, v.PasswordFile = "", ""
	if j.Password != "" {
		v.PasswordEnv = "password"
	}
	if v.Sentinel != nil {
		v.Sentinel = j.sentinel()
	}
	conn, err := store.Open(ctx, &v, j.env)
	if err != nil {
		return nil, err
	}
	return &workerConn{client: conn.Client, store: conn.Store}, nil
}

// sentinel is a copy of the Sentinel settings of j.Valkey (not nil) that
// reads the Sentinels' password from env.
func (j job) sentinel() *config.Sentinel {
	s := *j.Valkey.Sentinel
	s.PasswordEnv, s.PasswordFile = "", ""
	if j.SentinelPassword != "" {
		s.PasswordEnv = "sentinel_password"
	}
	return &s
}

// env is the environment a worker reads the passwords of j from.
func (j job) env(k string) (string, bool) {
	if k == "sentinel_password" {
		return j.SentinelPassword, true
	}
	return j.Password, true
}

// work runs job j once ready (which reports the worker ready and waits
// for the word to go) returns, as its Mode says, and tallies it. A rate
// job's decisions are all at the job's instant (a client clock); a lease
// job's are on the store's clock.
func (w *workerConn) work(ctx context.Context, j job, ready func() error) (tally, error) {
	var t tally
	pol, err := j.Policy.policy()
	if err != nil {
		return t, err
	}
	opts := []sluice.Option{sluice.WithName(j.Limiter), sluice.WithPrefix(j.Prefix), sluice.WithDenyCache(false),
		sluice.WithTimeout(checkTimeout), sluice.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}
	if j.Mode == "" { // leases live on the store's clock
		at := time.UnixMicro(j.AtMicro)
		opts = append(opts, sluice.WithClock(func() time.Time { return at }))
	}
	l, err := sluice.New(w.store, pol, opts...)
	if err != nil {
		return t, err
	}
	if err := ready(); err != nil {
		return t, err
	}
	switch j.Mode {
	case "hold":
		return hold(ctx, l, j), nil
	case "take":
		return take(ctx, l, j), nil
	}
	return decide(ctx, l, j), nil
}

// decide makes j.Attempts decisions on j's key from j.Goroutines
// goroutines, and tallies them.
func decide(ctx context.Context, l *sluice.Limiter, j job) tally {
	var t tally
	var left atomic.Int64
	left.Store(j.Attempts)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range max(j.Goroutines, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine tally
			for left.Add(-1) >= 0 {
				mine.count(l.Allow(ctx, j.Identity))
			}
			mu.Lock()
			t.merge(mine)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return t
}

// count tallies one decision: an error (the first one's text kept),
// degraded, allowed or refused.
func (t *tally) count(res sluice.Result, err error) {
	switch {
	case err != nil:
		t.Errors++
		if t.FirstError == "" {
			t.FirstError = err.Error()
		}
	case res.Degraded:
		t.Degraded++
	case res.Allowed:
		t.Allowed++
	default:
		t.Refused++
	}
}

// merge adds the counts of o, keeping t's first error if it has one.
func (t *tally) merge(o tally) {
	t.Allowed += o.Allowed
	t.Refused += o.Refused
	t.Degraded += o.Degraded
	t.Errors += o.Errors
	if t.FirstError == "" {
		t.FirstError = o.FirstError
	}
	t.Spans = append(t.Spans, o.Spans...)
	t.Lost += o.Lost
}

// workerProc is one running worker process.
type workerProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr *tailBuffer
}

// startWorkers starts the worker processes, once per Run.
func (r *run) startWorkers(ctx context.Context) error {
	if r.workers != nil {
		return nil
	}
	for range r.opts.Processes {
		w, err := r.startWorker(ctx)
		if err != nil {
			return err
		}
		r.workers = append(r.workers, w)
	}
	return nil
}

// startWorker starts one worker process, with pipes to its standard input
// and output and the tail of its standard error kept.
func (r *run) startWorker(ctx context.Context) (*workerProc, error) {
	cmd := r.opts.Worker(ctx)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	w := &workerProc{cmd: cmd, stdin: stdin, stdout: bufio.NewReader(stdout), stderr: &tailBuffer{}}
	cmd.Stderr = w.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting worker process %s: %w", cmd.Path, err)
	}
	return w, nil
}

// stopWorkers ends the worker processes: their input ends, they exit.
func (r *run) stopWorkers() {
	for _, w := range r.workers {
		w.stdin.Close()
	}
	for _, w := range r.workers {
		done := make(chan struct{})
		go func() { w.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			w.cmd.Process.Kill()
			<-done
		}
	}
	r.workers = nil
}

// spawn has the worker processes make attempts decisions of j, split
// among them, all starting together, and returns their summed tally.
func (r *run) spawn(ctx context.Context, p *config.Policy, j job, attempts int64) (tally, error) {
	var sum tally
	j, err := r.wireJob(p, j)
	if err != nil {
		return sum, err
	}
	if err := r.startWorkers(ctx); err != nil {
		r.stopWorkers()
		return sum, err
	}
	ok := false
	defer func() {
		if !ok { // a worker in an unknown state is not reused
			r.stopWorkers()
		}
	}()
	if err := r.sendJobs(j, attempts); err != nil {
		return sum, err
	}
	if err := r.awaitReady(); err != nil {
		return sum, err
	}
	for _, w := range r.workers {
		w.stdin.Write([]byte("go\n"))
	}
	sum, err = r.collect()
	ok = err == nil
	return sum, err
}

// wireJob completes j with what a worker process needs to reach Valkey
// and decide under p.
func (r *run) wireJob(p *config.Policy, j job) (job, error) {
	v := r.cfg.Valkey
	pw, err := v.Password(r.opts.Env)
	if err != nil {
		return j, err
	}
	j.Valkey, j.Password, j.Prefix, j.Limiter = *v, pw, r.prefix, p.Limiter
	if v.Sentinel != nil {
		if j.SentinelPassword, err = v.Sentinel.Password(r.opts.Env); err != nil {
			return j, err
		}
	}
	if j.Policy == (wirePolicy{}) { // unless the job carries a policy of its own
		j.Policy, err = toWire(p.Policy)
	}
	return j, err
}

// sendJobs sends each worker j with its share of attempts.
func (r *run) sendJobs(j job, attempts int64) error {
	n := len(r.workers)
	for i, w := range r.workers {
		wj := j
		wj.Attempts = attempts / int64(n)
		if int64(i) < attempts%int64(n) {
			wj.Attempts++
		}
		line, _ := json.Marshal(wj)
		if _, err := w.stdin.Write(append(line, '\n')); err != nil {
			return fmt.Errorf("worker process %d: %w; its stderr: %s", i, err, w.stderr)
		}
	}
	return nil
}

// awaitReady waits for every worker to say it is ready to start.
func (r *run) awaitReady() error {
	for i, w := range r.workers {
		var m map[string]any
		if err := w.read(i, &m); err != nil {
			return err
		}
		if m["ready"] != true {
			return fmt.Errorf("worker process %d: %v", i, m["error"])
		}
	}
	return nil
}

// collect reads every worker's tally and sums them.
func (r *run) collect() (tally, error) {
	var sum tally
	for i, w := range r.workers {
		var t tally
		if err := w.read(i, &t); err != nil {
			return sum, err
		}
		if t.Error != "" {
			return sum, fmt.Errorf("worker process %d: %s", i, t.Error)
		}
		sum.merge(t)
	}
	return sum, nil
}

// read reads one JSON line of worker process i into v.
func (w *workerProc) read(i int, v any) error {
	line, err := w.stdout.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("worker process %d gave no answer (%v); its stderr: %s", i, err, w.stderr)
	}
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("worker process %d: %v: %q", i, err, line)
	}
	return nil
}

// tailBuffer keeps the last 4 KiB written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > 4096 {
		b.buf = b.buf[len(b.buf)-4096:]
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
