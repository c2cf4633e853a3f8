package valkeystore_test

// Failure tests against real valkey-server processes (docs/failure.md, "Open
// or closed, and fast"): nothing listening, a listener that never
// answers, a server paused with SIGSTOP or killed mid-traffic and brought
// back, SCRIPT FLUSH mid-traffic, a server full under noeviction, and the
// circuit breaker. For each: every decision within the timeout plus a wide
// margin, open or closed as configured, no goroutine leak, and normal
// decisions again within a second of Valkey being back.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
)

const (
	// failTimeout is the limiters' decision timeout in these tests.
	failTimeout = 50 * time.Millisecond
	// failBound is the latest any decision may come. The margin is wide on
	// purpose: a loaded two-core machine running -race adds scheduling
	// delay; the bound is about "not after seconds", not about speed.
	failBound = failTimeout + 750*time.Millisecond
	// recoverWithin is how soon after Valkey is back decisions must be
	// normal (not Degraded) again.
	recoverWithin = time.Second
)

// rig is a store with two limiters on it, one failing open and one failing
// closed. Their limits are high, so a decision the store makes is allowed,
// and one the fail mode makes is allowed by open and refused by closed.
type rig struct {
	store        *valkeystore.Store
	open, closed *sluice.Limiter
	obs          *errLog
}

func newRig(t *testing.T, c valkey.Client, opts ...valkeystore.Option) *rig {
	t.Helper()
	s, err := valkeystore.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{store: s, obs: &errLog{}}
	prefix := "fail:" + strings.ReplaceAll(t.Name(), "/", ":")
	quiet := sluice.WithLogger(discardLogger)
	r.open, err = sluice.New(s, sluice.GCRA{Rate: 1e6, Per: time.Second, Burst: 1e6},
		sluice.WithName("open"), sluice.WithPrefix(prefix), sluice.WithTimeout(failTimeout), sluice.WithObserver(r.obs), quiet)
	if err != nil {
		t.Fatal(err)
	}
	r.closed, err = sluice.New(s, sluice.FixedWindow{Limit: 1e9, Window: time.Minute},
		sluice.WithName("closed"), sluice.WithPrefix(prefix), sluice.WithTimeout(failTimeout), sluice.WithObserver(r.obs), quiet,
		sluice.WithFailMode(sluice.FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// decide makes one decision with l on a random key and checks it: no
// error, within failBound, and a Degraded decision follows l's fail mode.
func (r *rig) decide(t testing.TB, l *sluice.Limiter) (sluice.Result, time.Duration) {
	key := fmt.Sprintf("k%d", rand.IntN(64))
	begin := time.Now()
	res, err := l.Allow(context.Background(), key)
	took := time.Since(begin)
	if err != nil {
		t.Errorf("%s: error %v; want a decision", l.Name(), err)
	}
	if took > failBound {
		t.Errorf("%s: decided after %v, want within %v", l.Name(), took, failBound)
	}
	if res.Degraded && res.Allowed != (l.FailMode() == sluice.FailOpen) {
		t.Errorf("%s (fail %s): degraded decision %+v", l.Name(), l.FailMode(), res)
	}
	if !res.Degraded && !res.Allowed {
		t.Errorf("%s: refused by the store %+v; the limits are meant to be out of reach", l.Name(), res)
	}
	return res, took
}

// both decides once with each limiter and reports whether both decisions
// were normal (made by the store).
func (r *rig) both(t testing.TB) bool {
	a, _ := r.decide(t, r.open)
	b, _ := r.decide(t, r.closed)
	return !a.Degraded && !b.Degraded
}

// healthy fails t unless both limiters decide normally within a second:
// the first script calls on a new server may take longer than the timeout
// on a loaded machine (NOSCRIPT, then EVAL compiles the script).
func (r *rig) healthy(t *testing.T) {
	t.Helper()
	r.recovered(t, time.Now())
}

// degraded makes n decisions with each limiter and fails t unless all were
// degraded; it returns the slowest.
func (r *rig) degraded(t *testing.T, n int) time.Duration {
	t.Helper()
	var slowest time.Duration
	for range n {
		for _, l := range []*sluice.Limiter{r.open, r.closed} {
			res, took := r.decide(t, l)
			if !res.Degraded {
				t.Fatalf("%s: %+v; want a degraded decision", l.Name(), res)
			}
			slowest = max(slowest, took)
		}
	}
	return slowest
}

// recovered polls both limiters until they decide normally, and fails t
// when that takes more than recoverWithin after back. It returns how long
// it took.
func (r *rig) recovered(t *testing.T, back time.Time) time.Duration {
	t.Helper()
	return r.recoveredWithin(t, back, recoverWithin)
}

// recoveredWithin is recovered with the bound within.
func (r *rig) recoveredWithin(t *testing.T, back time.Time, within time.Duration) time.Duration {
	t.Helper()
	for {
		if r.both(t) {
			return time.Since(back)
		}
		if time.Since(back) > within {
			t.Fatalf("still degraded %v after Valkey was back (breaker %v, errors: %v)",
				time.Since(back), r.store.BreakerState(), r.obs.summary())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// traffic runs decisions from several goroutines, each checked by decide,
// until stop.
type traffic struct {
	stop     chan struct{}
	wg       sync.WaitGroup
	n        atomic.Int64
	degraded atomic.Int64
	slowest  atomic.Int64 // nanoseconds
}

func (r *rig) traffic(t *testing.T, workers int) *traffic {
	tr := &traffic{stop: make(chan struct{})}
	for w := range workers {
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			l := r.open
			if w%2 == 1 {
				l = r.closed
			}
			for {
				select {
				case <-tr.stop:
					return
				default:
				}
				res, took := r.decide(t, l)
				tr.n.Add(1)
				if res.Degraded {
					tr.degraded.Add(1)
				}
				for {
					old := tr.slowest.Load()
					if int64(took) <= old || tr.slowest.CompareAndSwap(old, int64(took)) {
						break
					}
				}
				// An open breaker decides in microseconds: pace the
				// workers so they leave the CPU to the server.
				time.Sleep(time.Millisecond)
			}
		}()
	}
	return tr
}

// Stop stops the traffic and returns what it saw.
func (tr *traffic) Stop() string {
	close(tr.stop)
	tr.wg.Wait()
	return fmt.Sprintf("%d decisions, %d degraded, slowest %v", tr.n.Load(), tr.degraded.Load(), time.Duration(tr.slowest.Load()))
}

// errLog is an Observer that keeps the store errors of degraded decisions.
type errLog struct {
	mu   sync.Mutex
	errs map[string]int
}

func (e *errLog) ObserveDecision(_ string, _ sluice.Result, err error, _ time.Duration) {
	if err == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.errs == nil {
		e.errs = make(map[string]int)
	}
	e.errs[errClass(err)]++
}

// errClass shortens an error to its kind, so the summary stays short.
func errClass(err error) string {
	var verr *valkey.ValkeyError
	switch {
	case errors.Is(err, valkeystore.ErrCircuitOpen):
		return "circuit open"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.As(err, &verr):
		return strings.Fields(verr.Error())[0]
	}
	var nerr net.Error
	if errors.As(err, &nerr) {
		return "network"
	}
	return err.Error()
}

func (e *errLog) summary() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]int, len(e.errs))
	for k, v := range e.errs {
		out[k] = v
	}
	return out
}

var discardLogger = slog.New(slog.DiscardHandler)

// noLeak checks, when t ends, that no goroutine outlived it: call it first,
// so that its check runs after every other cleanup (servers stopped,
// clients closed).
func noLeak(t *testing.T) {
	before := len(goroutines())
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			runtime.GC() // a probe ends when its Store is collected
			now := goroutines()
			if len(now) <= before {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("goroutine leak: %d before the test, %d after:\n\n%s", before, len(now), strings.Join(now, "\n\n"))
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// goroutines returns the stacks of the running goroutines, except the
// caller and the process spawner (valkeytest/spawn), which lives as long as the test
// binary once the first server is started.
func goroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	all := strings.Split(string(buf), "\n\n")
	out := all[:0]
	for _, g := range all[1:] { // all[0] is the caller
		if !strings.Contains(g, "spawn.Start") {
			out = append(out, g)
		}
	}
	return out
}

// probes counts the running circuit-breaker probes.
func probes() int {
	n := 0
	for _, g := range goroutines() {
		if strings.Contains(g, "valkeystore.(*breaker).probe(") {
			n++
		}
	}
	return n
}

// TestUnreachable: nothing listens on the address (connections refused),
// or a listener accepts and never answers. Every decision is degraded,
// within the bound, with the breaker on (which opens) and off (the
// deadline layer alone keeps the bound), one at a time and 640 at once
// through the batcher.
func TestUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name string
		addr func(testing.TB) string
	}{
		{"nothing-listening", valkeytest.ClosedAddr},
		{"never-answers", valkeytest.Blackhole},
	} {
		for _, breaker := range []bool{true, false} {
			name := tc.name
			var opts []valkeystore.Option
			if !breaker {
				name += "/without-breaker"
				opts = append(opts, valkeystore.WithoutBreaker())
			}
			t.Run(name, func(t *testing.T) {
				noLeak(t)
				r := newRig(t, valkeytest.ClientTo(t, tc.addr(t)), opts...)
				slowest := r.degraded(t, 20)
				if st := r.store.BreakerState(); breaker && st != valkeystore.BreakerOpen {
					t.Errorf("breaker %v after 40 failed decisions, want open", st)
				}
				burst := r.burst(t, 32, 20)
				t.Logf("slowest of 40 decisions: %v; of 640 at once: %v; errors: %v", slowest, burst, r.obs.summary())
			})
		}
	}
}

// burst makes n decisions on each of workers goroutines at once, each
// checked by decide (degraded, within the bound), and returns the slowest.
func (r *rig) burst(t *testing.T, workers, n int) time.Duration {
	t.Helper()
	var slowest atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := r.open
			if w%2 == 1 {
				l = r.closed
			}
			for range n {
				res, took := r.decide(t, l)
				if !res.Degraded {
					t.Errorf("%s: %+v; want a degraded decision", l.Name(), res)
				}
				for {
					old := slowest.Load()
					if int64(took) <= old || slowest.CompareAndSwap(old, int64(took)) {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	return time.Duration(slowest.Load())
}

// TestOutageMidTraffic takes the server away under traffic (killed: nothing
// listens; paused with SIGSTOP: connections stay open and nothing answers)
// and brings it back on the same port (Restart; SIGCONT).
func TestOutageMidTraffic(t *testing.T) {
	for _, mode := range []string{"kill-restart", "pause-resume"} {
		t.Run(mode, func(t *testing.T) {
			noLeak(t)
			srv := valkeytest.Start(t)
			r := newRig(t, srv.Client(t))
			r.healthy(t)
			tr := r.traffic(t, 4)
			time.Sleep(100 * time.Millisecond)
			if mode == "kill-restart" {
				srv.Kill(t)
			} else {
				srv.Pause(t)
			}
			time.Sleep(300 * time.Millisecond) // let the traffic meet the outage
			slowest := r.degraded(t, 10)
			if st := r.store.BreakerState(); st != valkeystore.BreakerOpen {
				t.Errorf("breaker %v during the outage, want open", st)
			}
			time.Sleep(300 * time.Millisecond)
			if mode == "kill-restart" {
				srv.Restart(t)
			} else {
				srv.Resume(t)
			}
			back := time.Now()
			took := r.recovered(t, back)
			time.Sleep(100 * time.Millisecond)
			t.Logf("outage: slowest degraded decision %v; normal again %v after Valkey was back; traffic: %s; errors: %v",
				slowest, took, tr.Stop(), r.obs.summary())
		})
	}
}

// TestScriptFlushMidTraffic flushes the script cache repeatedly under
// traffic: the scripts reload and no decision is degraded for it. On a
// loaded machine a decision may still time out, and a spike that times out
// several concurrent calls opens the breaker for a few milliseconds; no
// decision may fail for any other reason, such as NOSCRIPT.
func TestScriptFlushMidTraffic(t *testing.T) {
	noLeak(t)
	srv := valkeytest.Start(t)
	c := srv.Client(t)
	r := newRig(t, c)
	r.healthy(t)
	tr := r.traffic(t, 4)
	for range 10 {
		time.Sleep(50 * time.Millisecond)
		if err := c.Do(context.Background(), c.B().ScriptFlush().Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	stats := tr.Stop()
	r.healthy(t)
	for class, n := range r.obs.summary() {
		if class != "timeout" && class != "circuit open" {
			t.Errorf("%d decisions degraded by %q", n, class)
		}
	}
	t.Logf("traffic: %s; errors: %v", stats, r.obs.summary())
}

// TestMaxmemoryNoeviction fills a server started with maxmemory 2mb and
// noeviction: scripts that write fail with OOM, so decisions are degraded,
// fast, and the breaker stays closed (the server answers at once). Freeing
// memory brings normal decisions back.
func TestMaxmemoryNoeviction(t *testing.T) {
	noLeak(t)
	// 1mb is below a fresh server's own footprint (about 950kB) plus the
	// client's connections: every write would fail from the start.
	srv := valkeytest.Start(t, "--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
	c := srv.Client(t)
	r := newRig(t, c)
	r.healthy(t)
	ctx := context.Background()
	filler := strings.Repeat("x", 8<<10)
	for n := 0; ; n++ {
		err := c.Do(ctx, c.B().Set().Key(fmt.Sprintf("filler:%d", n)).Value(filler).Build()).Error()
		if err != nil {
			if verr, ok := valkey.IsValkeyErr(err); ok && strings.HasPrefix(verr.Error(), "OOM") {
				break
			}
			t.Fatalf("filling: %v", err)
		}
		if n > 10000 {
			t.Fatal("no OOM after 80MB: maxmemory not applied?")
		}
	}
	// Full, but only just: the refused SET freed its own buffers, and a
	// decision or two would fit in what is left. Lower maxmemory under
	// what is used now, so that every write is refused.
	info, err := c.Do(ctx, c.B().Info().Section("memory").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	var used int64
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			used, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if used == 0 {
		t.Fatalf("no used_memory in INFO memory:\n%s", info)
	}
	if err := c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue("maxmemory", strconv.FormatInt(used-64<<10, 10)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	slowest := r.degraded(t, 20)
	if st := r.store.BreakerState(); st != valkeystore.BreakerClosed {
		t.Errorf("breaker %v under OOM, want closed: the server answers", st)
	}
	if n := r.obs.summary()["OOM"]; n != 40 {
		t.Errorf("%d OOM errors, want 40 (errors: %v)", n, r.obs.summary())
	}
	if err := c.Do(ctx, c.B().Flushall().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	took := r.recovered(t, time.Now())
	t.Logf("OOM: slowest degraded decision %v; normal again %v after FLUSHALL; errors: %v", slowest, took, r.obs.summary())
}

// TestBreaker checks that the breaker opens (decisions stop reaching the
// network: a proxy counts the bytes sent to Valkey, and an open breaker
// decides in microseconds), that only one probe runs while it is open and
// none while it is closed, and that it closes once the server answers.
func TestBreaker(t *testing.T) {
	noLeak(t)
	srv := valkeytest.Start(t)
	p := startProxy(t, srv.Addr)
	r := newRig(t, valkeytest.ClientTo(t, p.addr))
	r.healthy(t)
	if n := probes(); n != 0 {
		t.Fatalf("%d probes while healthy, want none", n)
	}
	// A standalone client's one node is listed, as Breakers says.
	if b := r.store.Breakers(); len(b) != 1 || b[p.addr] != valkeystore.BreakerClosed {
		t.Errorf("Breakers() = %v, want {%s: closed}", b, p.addr)
	}

	srv.Pause(t)
	defer srv.Resume(t) // harmless if resumed already
	opened := time.Now()
	tries := 0
	for r.store.BreakerState() != valkeystore.BreakerOpen {
		if tries++; tries > 100 {
			t.Fatalf("breaker still %v after %d decisions against a paused server", r.store.BreakerState(), tries)
		}
		r.decide(t, r.open)
	}
	t.Logf("breaker open after %d decisions (%v)", tries, time.Since(opened))
	for probes() != 1 && time.Since(opened) < time.Second { // it may not have been scheduled yet
		time.Sleep(time.Millisecond)
	}
	if n := probes(); n != 1 {
		t.Errorf("%d probes while open, want 1", n)
	}

	const n = 1000
	sent, evals := p.sent.Load(), p.evals.Load()
	lat := make([]time.Duration, 0, 2*n)
	for range n {
		for _, l := range []*sluice.Limiter{r.open, r.closed} {
			res, took := r.decide(t, l)
			if !res.Degraded {
				t.Fatalf("%s: %+v with the breaker open", l.Name(), res)
			}
			lat = append(lat, took)
		}
	}
	bytes, evals := p.sent.Load()-sent, p.evals.Load()-evals
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	t.Logf("open breaker: %d decisions, p50 %v, p99 %v, max %v; meanwhile %d scripts and %d bytes in all (probes, reconnects) sent to Valkey",
		len(lat), p50, p99, lat[len(lat)-1], evals, bytes)
	if evals != 0 {
		t.Errorf("%d scripts sent to Valkey during %d decisions with the breaker open, want none", evals, len(lat))
	}
	// 2000 EVALSHAs would be some 300kB; probes and handshakes are small.
	if bytes > 2000 {
		t.Errorf("%d bytes sent to Valkey during %d decisions with the breaker open; want only probes", bytes, len(lat))
	}
	if p50 > time.Millisecond {
		t.Errorf("open breaker decides in %v (median), want well under a millisecond", p50)
	}
	if c := r.obs.summary()["circuit open"]; c < 2*n {
		t.Errorf("%d decisions saw ErrCircuitOpen, want at least %d", c, 2*n)
	}

	srv.Resume(t)
	took := r.recovered(t, time.Now())
	if st := r.store.BreakerState(); st != valkeystore.BreakerClosed {
		t.Errorf("breaker %v after recovery, want closed", st)
	}
	deadline := time.Now().Add(time.Second)
	for probes() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := probes(); n != 0 {
		t.Errorf("%d probes after the breaker closed, want none", n)
	}
	t.Logf("breaker closed, decisions normal %v after resume", took)
}

// TestBreakerServerErrors: error replies mean the server answers, so they
// never open the breaker.
func TestBreakerServerErrors(t *testing.T) {
	c := valkeytest.Shared(t).Client(t)
	s, err := valkeystore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	obs := &errLog{}
	// A generous timeout: this test is about error replies, not timeouts.
	l, err := sluice.New(s, sluice.GCRA{Rate: 10, Per: time.Second, Burst: 10}, sluice.WithName("wrong"),
		sluice.WithPrefix("fail:"+t.Name()), sluice.WithTimeout(10*time.Second), sluice.WithObserver(obs), sluice.WithLogger(discardLogger))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// A list where the limiter keeps a string: every decision on it is
	// WRONGTYPE.
	if err := c.Do(ctx, c.B().Rpush().Key(driver.Key("fail:"+t.Name(), l.Name(), l.Rule(), "k")).Element("x").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		res, err := l.Allow(ctx, "k")
		if err != nil || !res.Degraded || !res.Allowed {
			t.Fatalf("%+v, %v; want degraded and allowed", res, err)
		}
	}
	if st := s.BreakerState(); st != valkeystore.BreakerClosed {
		t.Errorf("breaker %v after WRONGTYPE replies, want closed", st)
	}
	if n := obs.summary()["WRONGTYPE"]; n != 20 {
		t.Errorf("errors %v, want 20 WRONGTYPE", obs.summary())
	}
}

// TestWithoutBreaker: with the breaker off, every call goes to Valkey.
func TestWithoutBreaker(t *testing.T) {
	noLeak(t)
	p := startProxy(t, valkeytest.ClosedAddr(t))
	r := newRig(t, valkeytest.ClientTo(t, p.addr), valkeystore.WithoutBreaker())
	r.degraded(t, 10)
	if st := r.store.BreakerState(); st != valkeystore.BreakerClosed {
		t.Errorf("breaker %v, want closed (off)", st)
	}
	if n := p.conns.Load(); n < 20 {
		t.Errorf("%d connection attempts for 20 decisions without a breaker, want one each", n)
	}
}

// TestTimeoutsPerPolicy: with Valkey answering in 100ms, limiters with a
// 50ms timeout on the same store time out (degraded, and their timeouts
// open the breaker), and a limiter with a 1s timeout is still decided by
// Valkey: the breaker opened by 50ms calls refuses only calls with no more
// time than those, and the batcher does not bound a 1s decision by a 50ms
// one.
func TestTimeoutsPerPolicy(t *testing.T) {
	srv := valkeytest.Start(t)
	p := startSlowProxy(t, srv.Addr, 100*time.Millisecond)
	// Without AlwaysPipelining, valkey-go sends a lone call on a connection
	// whose own read deadline is the call's: a 50ms call's timeout closes
	// the connection, and the 1s calls on it fail with it.
	c := valkeytest.ClientTo(t, p.addr, func(o *valkey.ClientOption) { o.AlwaysPipelining = true })
	s, err := valkeystore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	prefix := "fail:" + t.Name()
	mk := func(name string, timeout time.Duration, mode sluice.FailMode, obs *errLog) *sluice.Limiter {
		l, err := sluice.New(s, sluice.GCRA{Rate: 1e6, Per: time.Second, Burst: 1e6}, sluice.WithName(name),
			sluice.WithPrefix(prefix), sluice.WithTimeout(timeout), sluice.WithFailMode(mode),
			sluice.WithObserver(obs), sluice.WithLogger(discardLogger))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	fastObs, slowObs := &errLog{}, &errLog{}
	fast := mk("fast", 50*time.Millisecond, sluice.FailOpen, fastObs)
	slow := mk("slow", time.Second, sluice.FailClosed, slowObs)

	var fastN, fastDegraded, slowN, slowDegraded, slowest atomic.Int64
	decideFast := func() bool {
		res, err := fast.Allow(context.Background(), fmt.Sprintf("k%d", rand.IntN(64)))
		if err != nil {
			t.Error(err)
			return false
		}
		fastN.Add(1)
		if res.Degraded {
			fastDegraded.Add(1)
		}
		return true
	}
	decideSlow := func() bool {
		begin := time.Now()
		res, err := slow.Allow(context.Background(), fmt.Sprintf("k%d", rand.IntN(64)))
		took := time.Since(begin)
		if err != nil {
			t.Error(err)
			return false
		}
		slowN.Add(1)
		if res.Degraded {
			slowDegraded.Add(1)
		}
		for {
			old := slowest.Load()
			if int64(took) <= old || slowest.CompareAndSwap(old, int64(took)) {
				break
			}
		}
		return true
	}
	// Six workers decide with the 50ms limiter, two with the 1s one.
	stop := loop(8, func(w, _ int) bool {
		if w < 6 {
			return decideFast()
		}
		return decideSlow()
	})
	time.Sleep(2 * time.Second)
	stop()
	t.Logf("50ms limiter: %d decisions, %d degraded (errors %v); 1s limiter: %d decisions, %d degraded (errors %v), slowest %v; breaker %v; %d connections",
		fastN.Load(), fastDegraded.Load(), fastObs.summary(), slowN.Load(), slowDegraded.Load(), slowObs.summary(), time.Duration(slowest.Load()), s.BreakerState(), p.conns.Load())
	if slowN.Load() < 5 {
		t.Errorf("only %d decisions by the 1s limiter in 2s", slowN.Load())
	}
	// None refused by the breaker. A few may fail with valkey-go's own
	// connection errors: it makes a connection (dial, HELLO) under the
	// context of the call that needs it first, and when that call's 50ms
	// pass, the 1s calls waiting for the same connection fail with it.
	if n := slowObs.summary()["circuit open"]; n != 0 {
		t.Errorf("%d decisions of the 1s limiter refused by the breaker that the 50ms limiter's timeouts opened", n)
	}
	if n := slowDegraded.Load(); n*5 > slowN.Load() {
		t.Errorf("%d of %d decisions of the 1s limiter degraded with Valkey answering in 100ms", n, slowN.Load())
	}
	if fastDegraded.Load() == 0 {
		t.Errorf("no decision of the 50ms limiter degraded with Valkey answering in 100ms: is the proxy slow?")
	}
}

// proxy forwards TCP connections to target and counts the connections,
// the bytes sent towards target and the script calls (EVAL and EVALSHA)
// among them. When target refuses, it closes the client's connection at
// once.
type proxy struct {
	addr  string
	sent  atomic.Int64
	evals atomic.Int64
	conns atomic.Int64
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	return startSlowProxy(t, target, 0)
}

// startSlowProxy is startProxy with every reply held back by delay: a
// slow server (or a long way to it) that still answers everything.
func startSlowProxy(t *testing.T, target string, delay time.Duration) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{addr: ln.Addr().String()}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		open  []net.Conn
		ended bool
	)
	track := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if ended {
			c.Close()
			return false
		}
		open = append(open, c)
		return true
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			p.conns.Add(1)
			if !track(in) {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			if !track(out) {
				return
			}
			wg.Add(2)
			go func() {
				defer wg.Done()
				io.Copy(&countWriter{w: out, p: p}, in)
				out.Close()
			}()
			go func() {
				defer wg.Done()
				if delay > 0 {
					delayedCopy(in, out, delay)
				} else {
					io.Copy(in, out)
				}
				in.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		ended = true
		ln.Close()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return p
}

// delayedCopy copies src to dst, each chunk delay after it was read.
func delayedCopy(dst io.Writer, src io.Reader, delay time.Duration) {
	type chunk struct {
		at time.Time
		b  []byte
	}
	ch := make(chan chunk, 4096)
	go func() {
		defer close(ch)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				ch <- chunk{time.Now(), buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	broken := false
	for c := range ch {
		if broken {
			continue // drain until src ends
		}
		time.Sleep(time.Until(c.at.Add(delay)))
		if _, err := dst.Write(c.b); err != nil {
			broken = true
		}
	}
}

type countWriter struct {
	w    io.Writer
	p    *proxy
	tail []byte // the end of the previous write, for a name split across writes
}

// evalName is how RESP spells both commands' names: "$4\r\nEVAL\r\n" and
// "$7\r\nEVALSHA\r\n" both contain "\nEVAL".
const evalName = "\nEVAL"

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.p.sent.Add(int64(n))
	buf := append(c.tail, b[:n]...)
	c.p.evals.Add(int64(strings.Count(string(buf), evalName)))
	keep := min(len(buf), len(evalName)-1)
	c.tail = append(c.tail[:0], buf[len(buf)-keep:]...)
	return n, err
}

// TestBreakersPerNode: one breaker per node: the server of a standalone
// client, each primary of a cluster.
func TestBreakersPerNode(t *testing.T) {
	srv := valkeytest.Shared(t)
	s, err := valkeystore.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(s.Breakers()); got != fmt.Sprintf("map[%s:closed]", srv.Addr) {
		t.Errorf("standalone: %s", got)
	}
	cl := valkeytest.SharedCluster(t)
	s, err = valkeystore.New(cl.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	b := s.Breakers()
	for _, a := range cl.Addrs {
		if st, ok := b[a]; !ok || st != valkeystore.BreakerClosed {
			t.Errorf("cluster: %v; want each of %v closed", b, cl.Addrs)
		}
	}
	if len(b) != len(cl.Addrs) {
		t.Errorf("cluster: %v; want one breaker per primary %v", b, cl.Addrs)
	}
	if s, err = valkeystore.New(srv.Client(t), valkeystore.WithoutBreaker()); err != nil || len(s.Breakers()) != 0 {
		t.Errorf("without breakers: %v, %v", s.Breakers(), err)
	}
}

// loop runs n goroutines, worker w calling work(w, i) for i = 0, 1, ...
// until work returns false or the returned stop is called; stop waits for
// them all.
func loop(n int, work func(w, i int) bool) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				if !work(w, i) {
					return
				}
			}
		}()
	}
	return func() {
		close(done)
		wg.Wait()
	}
}
