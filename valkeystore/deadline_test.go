package valkeystore_test

// Tests of the deadline layer (deadline.go): decisions return by their
// deadlines where valkey-go alone would make them wait for another call's
// connection or for a connection's close, and a decision on a healthy node
// goes straight to valkey-go.

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/valkeytest"
	"github.com/sluicehq/sluice/valkeystore"
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

// TestDeadlineAfterQuiet: a connection that ends while the store is quiet
// (the server, or something on the way, closed it; valkey-go's background
// PING found it dead) is opened again by the next call, and the server now
// never answers. A 1s decision opens it; the 50ms decisions behind it come
// within their timeout.
func TestDeadlineAfterQuiet(t *testing.T) {
	noLeak(t)
	srv := valkeytest.Start(t)
	px := startHangProxy(t, srv.Addr)
	c := valkeytest.ClientTo(t, px.addr, func(o *valkey.ClientOption) { o.AlwaysPipelining = true })
	s, err := valkeystore.New(c, valkeystore.WithoutBreaker())
	if err != nil {
		t.Fatal(err)
	}
	slow := deadlineLimiter(t, s, "slow", time.Second)
	fast := deadlineLimiter(t, s, "fast", failTimeout)
	for i := range 10 {
		if res := within(t, slow, time.Second, "warm"); res.Degraded {
			t.Fatalf("decision %d degraded before the fault", i)
		}
	}
	time.Sleep(300 * time.Millisecond) // quiet
	px.hang()
	time.Sleep(50 * time.Millisecond) // valkey-go sees its connection end
	mixed(t, slow, fast, 20*time.Millisecond, 8)
}

// TestDeadlineMidTraffic: the same fault under traffic, without a quiet
// spell: the connection ends under calls in flight, which fail, and the
// calls after them open a new one.
func TestDeadlineMidTraffic(t *testing.T) {
	noLeak(t)
	srv := valkeytest.Start(t)
	px := startHangProxy(t, srv.Addr)
	c := valkeytest.ClientTo(t, px.addr, func(o *valkey.ClientOption) { o.AlwaysPipelining = true })
	s, err := valkeystore.New(c, valkeystore.WithoutBreaker())
	if err != nil {
		t.Fatal(err)
	}
	slow := deadlineLimiter(t, s, "slow", time.Second)
	fast := deadlineLimiter(t, s, "fast", failTimeout)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		l, timeout := fast, failTimeout
		if w < 2 {
			l, timeout = slow, time.Second
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				within(t, l, timeout, fmt.Sprintf("k%d-%d", w, i%16))
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	px.hang()
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()
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
		var ops []sluice.Op
		for i, r := range rules {
			ops = append(ops, sluice.Op{Key: sluice.Key("deadline:"+t.Name(), fmt.Sprint(i), r, "id"), Rule: r, Cost: 1})
		}
		begin := time.Now()
		err := s.Do(ctx, ops)
		if err == nil {
			err = ops[0].Err
		}
		return err, time.Since(begin)
	}
	for range 10 {
		if err, _ := batch(time.Second); err != nil {
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
