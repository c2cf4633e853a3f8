package valkeystore_test

// Tests of the deadline layer (deadline.go): decisions return by their
// deadlines where valkey-go alone would make them wait for another call's
// connection or for a connection's close, and a decision on a healthy node
// goes straight to valkey-go.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
)

// hangProxy forwards connections to a server until hang, which closes them
// (valkey-go sees its connection end while no call of the store fails) and
// makes every later connection a black hole: accepted, never answered.
type hangProxy struct {
	addr   string
	mu     sync.Mutex
	conns  []net.Conn
	hung   bool
	closed bool
	wg     sync.WaitGroup
}

func startHangProxy(t *testing.T, target string) *hangProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &hangProxy{addr: l.Addr().String()}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			hung, closed := p.hung, p.closed
			var up net.Conn
			if !hung && !closed {
				up, err = net.Dial("tcp", target)
			}
			if closed || up == nil && !hung {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.conns = append(p.conns, c)
			if up != nil {
				p.conns = append(p.conns, up)
			}
			p.wg.Add(1)
			p.mu.Unlock()
			go func() {
				defer p.wg.Done()
				if up == nil {
					io.Copy(io.Discard, c) // a black hole
					return
				}
				go func() { io.Copy(up, c); up.Close() }()
				io.Copy(c, up)
				c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		p.mu.Lock()
		p.closed = true
		l.Close()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// hang closes every connection and makes the later ones black holes.
func (p *hangProxy) hang() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hung = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// deadlineLimiter is a limiter of s that never refuses, with timeout.
func deadlineLimiter(t *testing.T, s *valkeystore.Store, name string, timeout time.Duration) *sluice.Limiter {
	t.Helper()
	l, err := sluice.New(s, sluice.GCRA{Rate: 1e6, Per: time.Second, Burst: 1e6}, sluice.WithName(name),
		sluice.WithPrefix("deadline:"+t.Name()), sluice.WithTimeout(timeout), sluice.WithLogger(discardLogger))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// within makes one decision with l and fails t unless it comes within
// timeout plus the failure tests' margin.
func within(t *testing.T, l *sluice.Limiter, timeout time.Duration, key string) sluice.Result {
	begin := time.Now()
	res, err := l.Allow(context.Background(), key)
	took := time.Since(begin)
	if err != nil {
		t.Errorf("%s: %v", l.Name(), err)
	}
	if bound := timeout + failBound - failTimeout; took > bound {
		t.Errorf("%s (timeout %v): decided after %v, want within %v", l.Name(), timeout, took, bound)
	}
	return res
}

// mixed decides with slow once and, starting lead later, with fast on
// workers goroutines at once, each checked by within.
func mixed(t *testing.T, slow, fast *sluice.Limiter, lead time.Duration, workers int) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		within(t, slow, time.Second, "slow")
	}()
	time.Sleep(lead)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			within(t, fast, failTimeout, fmt.Sprintf("fast%d", w))
		}()
	}
	wg.Wait()
}

// TestDeadlineBehindHandshake: against a listener that never answers, 50ms
// decisions wait for connections that 1s decisions open (valkey-go makes a
// call that needs a connection wait for the call opening it): without the
// breaker, each still comes within its own timeout.
func TestDeadlineBehindHandshake(t *testing.T) {
	noLeak(t)
	s, err := valkeystore.New(valkeytest.ClientTo(t, valkeytest.Blackhole(t)), valkeystore.WithoutBreaker())
	if err != nil {
		t.Fatal(err)
	}
	slow := deadlineLimiter(t, s, "slow", time.Second)
	fast := deadlineLimiter(t, s, "fast", failTimeout)
	for range 2 {
		mixed(t, slow, fast, 20*time.Millisecond, 8)
	}
}

// TestPingByDeadline: a Ping behind another Ping's handshake with a black
// hole returns by its own deadline, not by the other's (valkey-go makes it
// wait for that handshake).
func TestPingByDeadline(t *testing.T) {
	noLeak(t)
	s, err := valkeystore.New(valkeytest.ClientTo(t, valkeytest.Blackhole(t)), valkeystore.WithoutBreaker())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := s.Ping(ctx); err == nil {
			t.Error("a Ping of a black hole succeeded")
		}
	}()
	time.Sleep(50 * time.Millisecond) // the first Ping opens the connection
	ctx, cancel := context.WithTimeout(context.Background(), failTimeout)
	defer cancel()
	begin := time.Now()
	err = s.Ping(ctx)
	took := time.Since(begin)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Ping: %v, want the context's deadline", err)
	}
	// The other Ping's handshake ends by the client's dial timeout, about
	// 1s here, so the bound is tighter than failBound.
	if bound := failTimeout + 450*time.Millisecond; took > bound {
		t.Errorf("a %v Ping returned after %v, want within %v", failTimeout, took, bound)
	}
	<-done
}

// hangRig is a store through a hangProxy to a fresh server, with a 1s
// and a 50ms limiter; c is its client, AlwaysPipelining as the package
// documentation advises (valkey-go then reads replies on a goroutine of
// its own and sees a connection end at once).
func hangRig(t *testing.T) (px *hangProxy, c valkey.Client, s *valkeystore.Store, slow, fast *sluice.Limiter) {
	srv := valkeytest.Start(t)
	px = startHangProxy(t, srv.Addr)
	c = valkeytest.ClientTo(t, px.addr, func(o *valkey.ClientOption) { o.AlwaysPipelining = true })
	s, err := valkeystore.New(c, valkeystore.WithoutBreaker())
	if err != nil {
		t.Fatal(err)
	}
	return px, c, s, deadlineLimiter(t, s, "slow", time.Second), deadlineLimiter(t, s, "fast", failTimeout)
}

// warm makes decisions with each limiter until they are normal.
func warm(t *testing.T, ls ...*sluice.Limiter) {
	t.Helper()
	for _, l := range ls {
		for i := 0; ; i++ {
			res, err := l.Allow(context.Background(), "warm")
			if err == nil && !res.Degraded {
				break
			}
			if i == 50 {
				t.Fatalf("%s: no normal decision before the fault: %+v %v", l.Name(), res, err)
			}
		}
	}
}

// fastBehind starts lead (which opens a connection), then, 20ms later,
// decides with fast on 8 goroutines at once, each checked by within.
func fastBehind(t *testing.T, lead func(), fast *sluice.Limiter) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		lead()
	}()
	time.Sleep(20 * time.Millisecond)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			within(t, fast, failTimeout, fmt.Sprintf("fast%d", w))
		}()
	}
	wg.Wait()
}

// ping is a call of the application on the store's client with a 1s
// timeout: a client is often shared.
func ping(c valkey.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c.Do(ctx, c.B().Ping().Build())
}

// TestDeadlineAtOnce: the connection ends while no call is in flight (the
// server, or something on the way, closed it) and the server now never
// answers; a 1s decision opens the next connection at once, and 50ms
// decisions come behind it, the node still trusted: each comes within its
// timeout.
func TestDeadlineAtOnce(t *testing.T) {
	noLeak(t)
	px, _, _, slow, fast := hangRig(t)
	warm(t, slow, fast)
	px.hang()
	time.Sleep(30 * time.Millisecond) // valkey-go sees its connection end
	fastBehind(t, func() { within(t, slow, time.Second, "slow") }, fast)
}

// TestDeadlineAfterQuiet: the same after a quiet spell (as when valkey-go's
// background PING finds an idle connection dead), the next connection
// opened by the application's own 1s call on the shared client.
func TestDeadlineAfterQuiet(t *testing.T) {
	noLeak(t)
	px, c, _, _, fast := hangRig(t)
	warm(t, fast)
	time.Sleep(300 * time.Millisecond) // quiet
	px.hang()
	time.Sleep(30 * time.Millisecond) // valkey-go sees its connection end
	fastBehind(t, func() { ping(c) }, fast)
}

// TestDeadlineAfterFailure: a 10ms decision fails on the dead connection;
// the application's 1s call then opens the next one, and the 50ms
// decisions that follow at once, within 100ms of the latest reply, come
// within their timeout.
func TestDeadlineAfterFailure(t *testing.T) {
	noLeak(t)
	px, c, s, _, fast := hangRig(t)
	first := deadlineLimiter(t, s, "first", 10*time.Millisecond)
	warm(t, fast)
	px.hang()
	time.Sleep(15 * time.Millisecond) // valkey-go sees its connection end
	if res := within(t, first, 10*time.Millisecond, "first"); !res.Degraded {
		t.Fatalf("a decision after the fault was not degraded: %+v", res)
	}
	fastBehind(t, func() { ping(c) }, fast)
}

// TestDeadlineMidTraffic: the same fault under traffic, without a quiet
// spell: the connection ends under calls in flight, which fail, and the
// calls after them open a new one.
func TestDeadlineMidTraffic(t *testing.T) {
	noLeak(t)
	px, _, _, slow, fast := hangRig(t)
	stop := loop(8, func(w, i int) bool {
		l, timeout := fast, failTimeout
		if w < 2 {
			l, timeout = slow, time.Second
		}
		within(t, l, timeout, fmt.Sprintf("k%d-%d", w, i%16))
		return true
	})
	time.Sleep(200 * time.Millisecond)
	px.hang()
	time.Sleep(1500 * time.Millisecond)
	stop()
}

// TestDeadlineDedicatedPipeline: valkey-go sends a pipeline of at least
// ClientOption.BlockingPipeline commands on a connection of its own and
// closes it when a call on it times out, which against a paused server
// waits about a second. A batch of two algorithms (two script calls) on a
// healthy node that then pauses still comes by its deadline.
func TestDeadlineDedicatedPipeline(t *testing.T) {
	noLeak(t)
	srv := valkeytest.Start(t)
	c := srv.Client(t, func(o *valkey.ClientOption) {
		o.AlwaysPipelining = true
		o.BlockingPipeline = 2
	})
	s, err := valkeystore.New(c, valkeystore.WithoutBreaker())
	if err != nil {
		t.Fatal(err)
	}
	var rules []sluice.Rule
	for _, p := range []sluice.Policy{sluice.GCRA{Rate: 1e6, Per: time.Second, Burst: 1e6}, sluice.FixedWindow{Limit: 1e9, Window: time.Minute}} {
		r, err := p.Rule()
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, r)
	}
	batch := func(timeout time.Duration) (error, time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		var ops []driver.Op
		for i, r := range rules {
			ops = append(ops, driver.Op{Key: driver.Key("deadline:"+t.Name(), fmt.Sprint(i), r, "id"), Rule: r, Cost: 1})
		}
		begin := time.Now()
		err := s.Do(ctx, ops)
		if err == nil {
			err = ops[0].Err
		}
		return err, time.Since(begin)
	}
	// The same timeout before and after: a call goes straight to
	// valkey-go only with about the longest time left of the node's calls.
	for i := 0; ; i++ {
		err, _ := batch(failTimeout)
		if err == nil {
			break
		}
		if i == 50 {
			t.Fatalf("before the pause: %v", err)
		}
	}
	srv.Pause(t)
	defer srv.Resume(t)
	for range 3 {
		err, took := batch(failTimeout)
		if err == nil {
			t.Error("a batch succeeded on a paused server")
		}
		if took > failBound {
			t.Errorf("a batch of two script calls failed after %v, want within %v", took, failBound)
		}
	}
}

// TestDeadlineHealthyDirect: on a healthy node, decisions go straight to
// valkey-go, on the caller's goroutine; none waits for a goroutine of its
// own (but for one after the odd stall of a loaded machine).
func TestDeadlineHealthyDirect(t *testing.T) {
	srv := valkeytest.Start(t)
	s, err := valkeystore.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	l := deadlineLimiter(t, s, "l", 5*time.Second)
	for range 10 {
		within(t, l, 5*time.Second, "warm")
	}
	const n = 200
	before := valkeystore.GuardedCalls(s)
	for i := range n {
		if res := within(t, l, 5*time.Second, fmt.Sprint(i)); res.Degraded {
			t.Fatalf("decision %d degraded", i)
		}
	}
	if g := valkeystore.GuardedCalls(s) - before; g*10 > n {
		t.Errorf("%d of %d decisions on a healthy node ran on a goroutine of their own", g, n)
	}
}
