package valkeystore

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
)

// The breaker's state machine, with replies made up: a real client is only
// the probe's target.

var (
	ok      = []valkey.ValkeyResult{{}}
	netErr  = []valkey.ValkeyResult{valkey.NewErrorResult(io.EOF)}
	timeout = []valkey.ValkeyResult{valkey.NewErrorResult(context.DeadlineExceeded)}
)

// newTestBreaker returns a Store whose breaker probes addr, and a log of
// its transitions.
func newTestBreaker(t *testing.T, addr string, b Breaker) (*Store, *transitions) {
	t.Helper()
	tr := &transitions{}
	b.OnStateChange = tr.add
	s, err := New(valkeytest.ClientTo(t, addr), WithBreaker(b))
	if err != nil {
		t.Fatal(err)
	}
	return s, tr
}

type transitions struct {
	mu  sync.Mutex
	log []BreakerState
}

func (tr *transitions) add(_ string, st BreakerState) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.log = append(tr.log, st)
}

func (tr *transitions) String() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	s := ""
	for _, st := range tr.log {
		s += st.String() + " "
	}
	return s
}

func waitState(t *testing.T, s *Store, want BreakerState) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for s.BreakerState() != want {
		if time.Now().After(deadline) {
			t.Fatalf("breaker %v, want %v", s.BreakerState(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestBreakerStateMachine(t *testing.T) {
	srv := valkeytest.Start(t)
	s, tr := newTestBreaker(t, srv.Addr, Breaker{Failures: 3})
	b := s.e.topo.single.breaker
	ctx := context.Background()
	// The context of a call that timed out: its deadline has passed.
	expired, cancel := context.WithDeadline(ctx, time.Now())
	defer cancel()
	ctxOf := func(resps []valkey.ValkeyResult) context.Context {
		if &resps[0] == &timeout[0] {
			return expired
		}
		return ctx
	}

	// Failures must be consecutive: a success starts the count again.
	for _, resps := range [][]valkey.ValkeyResult{netErr, timeout, ok, netErr, timeout} {
		p, err := b.allow(hard)
		if p != normal || err != nil {
			t.Fatalf("closed: allow = %v, %v", trial, err)
		}
		b.record(ctxOf(resps), normal, hard, resps)
	}
	if st := s.BreakerState(); st != BreakerClosed {
		t.Fatalf("breaker %v after 2 consecutive failures of 3", st)
	}
	b.record(ctx, normal, hard, netErr)
	if st := s.BreakerState(); st != BreakerOpen {
		t.Fatalf("breaker %v after 3 consecutive failures", st)
	}
	_, err := b.allow(hard)
	if !errors.Is(err, ErrCircuitOpen) || !errors.Is(err, sluice.ErrStoreUnavailable) || !errors.Is(err, io.EOF) {
		t.Fatalf("open: %v; want ErrCircuitOpen, sluice.ErrStoreUnavailable and the cause", err)
	}
	t.Logf("open: %v", err)

	// The server answers: the probe turns the breaker half-open, and exactly
	// one caller gets the trial.
	waitState(t, s, BreakerHalfOpen)
	var trials atomic.Int32
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := b.allow(hard)
			if p == trial {
				trials.Add(1)
			} else if !errors.Is(err, ErrCircuitOpen) {
				t.Errorf("half-open, not the trial: %v", err)
			}
		}()
	}
	wg.Wait()
	if n := trials.Load(); n != 1 {
		t.Fatalf("%d trials at once, want 1", n)
	}

	// A trial canceled by its caller says nothing: still half-open, and the
	// next call is the trial.
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	b.record(canceled, trial, hard, []valkey.ValkeyResult{valkey.NewErrorResult(context.Canceled)})
	if st := s.BreakerState(); st != BreakerHalfOpen {
		t.Fatalf("breaker %v after a canceled trial, want half-open", st)
	}
	// A failed trial opens it again, with a new probe, which sees the
	// server and turns it half-open again.
	if p, _ := b.allow(hard); p != trial {
		t.Fatal("half-open: no trial")
	}
	b.record(expired, trial, hard, timeout)
	if st := s.BreakerState(); st != BreakerOpen {
		t.Fatalf("breaker %v after a failed trial, want open", st)
	}
	waitState(t, s, BreakerHalfOpen)
	// A trial that succeeds closes it.
	if p, _ := b.allow(hard); p != trial {
		t.Fatal("half-open: no trial")
	}
	b.record(ctx, trial, hard, ok)
	if st := s.BreakerState(); st != BreakerClosed {
		t.Fatalf("breaker %v after a good trial, want closed", st)
	}
	if got, want := tr.String(), "open half-open open half-open closed "; got != want {
		t.Errorf("transitions %q, want %q", got, want)
	}
}

// TestBreakerProbeBackoff: against a closed port the probe keeps trying
// with growing waits, up to MaxProbeInterval.
func TestBreakerProbeBackoff(t *testing.T) {
	var pings atomic.Int32
	addr := valkeytest.ClosedAddr(t)
	s, _ := newTestBreaker(t, addr, Breaker{Failures: 1, MinProbeInterval: 5 * time.Millisecond, MaxProbeInterval: 40 * time.Millisecond})
	s.e.client = countingClient{Client: s.e.client, n: &pings}
	s.e.topo.single.breaker.record(context.Background(), normal, hard, netErr)
	time.Sleep(400 * time.Millisecond)
	// Waits of about 5, 10, 20, 40, 40, ... ms (less up to a fifth): about
	// 12 probes in 400ms; without backoff at 5ms there would be 80.
	if n := pings.Load(); n < 6 || n > 20 {
		t.Errorf("%d probes in 400ms, want about 12", n)
	}
	if st := s.BreakerState(); st != BreakerOpen {
		t.Errorf("breaker %v, want open", st)
	}
}

// countingClient counts the probe's calls to Nodes (one per probe).
type countingClient struct {
	valkey.Client
	n *atomic.Int32
}

func (c countingClient) Nodes() map[string]valkey.Client {
	c.n.Add(1)
	return c.Client.Nodes()
}

// TestBreakerHandshakeTimeout: a call whose deadline passes during a new
// connection's handshake fails with a network timeout, not the context's
// error. Among timeouts of 50ms calls it still counts as a timeout, so the
// breaker they open lets a 1s call through; a network error that is not a
// timeout, or a network timeout before the call's deadline, still bars
// every call.
func TestBreakerHandshakeTimeout(t *testing.T) {
	srv := valkeytest.Start(t)
	ioTimeout := []valkey.ValkeyResult{valkey.NewErrorResult(&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded})}
	ctx := context.Background()
	expired, cancel := context.WithDeadline(ctx, time.Now())
	defer cancel()
	later, cancel2 := context.WithTimeout(ctx, time.Hour)
	defer cancel2()
	budget := int64(50 * time.Millisecond)
	for _, tc := range []struct {
		name    string
		ctx     context.Context // the last failure's
		last    []valkey.ValkeyResult
		refused bool // a 1s call, once the breaker is open
	}{
		{"handshake timeout after the deadline", expired, ioTimeout, false},
		{"context deadline", expired, timeout, false},
		{"network timeout before the deadline", later, ioTimeout, true},
		{"connection closed", expired, netErr, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestBreaker(t, srv.Addr, Breaker{Failures: 3, MinProbeInterval: time.Hour})
			b := s.e.topo.single.breaker
			b.record(expired, normal, budget, timeout)
			b.record(expired, normal, budget, timeout)
			b.record(tc.ctx, normal, budget, tc.last)
			if st := s.BreakerState(); st != BreakerOpen {
				t.Fatalf("breaker %v after 3 failures, want open", st)
			}
			p, err := b.allow(int64(time.Second))
			if refused := err != nil; refused != tc.refused {
				t.Errorf("a 1s call: pass %v, err %v; want refused %v", p, err, tc.refused)
			}
			if _, err := b.allow(budget); err == nil {
				t.Error("a 50ms call went through the open breaker")
			}
		})
	}
}

func TestClassify(t *testing.T) {
	ctx := context.Background()
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	expired, cancel2 := context.WithDeadline(ctx, time.Now())
	defer cancel2()
	for _, tc := range []struct {
		ctx  context.Context
		err  error
		want outcome
	}{
		{ctx, nil, succeeded},
		{ctx, io.EOF, failed},
		{expired, context.DeadlineExceeded, failed},
		{ctx, context.DeadlineExceeded, neutral}, // another call's deadline closed the connection
		{ctx, errors.New("dial tcp: connection refused"), failed},
		{canceled, context.Canceled, neutral},
		{ctx, context.Canceled, failed}, // canceled, but not by the caller
		{ctx, valkey.ErrClosing, neutral},
	} {
		if got := classify(tc.ctx, tc.err); got != tc.want {
			t.Errorf("classify(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestBreakerOptions(t *testing.T) {
	c := valkeytest.ClientTo(t, valkeytest.ClosedAddr(t))
	for _, b := range []Breaker{
		{Failures: -1},
		{MinProbeInterval: time.Second, MaxProbeInterval: time.Millisecond},
		{ProbeTimeout: -time.Second},
	} {
		if _, err := New(c, WithBreaker(b)); err == nil {
			t.Errorf("%+v: no error", b)
		}
	}
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	got := *s.e.breakerCfg
	if got.Failures != DefaultBreakerFailures || got.MinProbeInterval != DefaultBreakerMinProbeInterval ||
		got.MaxProbeInterval != DefaultBreakerMaxProbeInterval || got.ProbeTimeout != DefaultBreakerProbeTimeout {
		t.Errorf("defaults: %+v", got)
	}
	s, err = New(c, WithoutBreaker())
	if err != nil || s.e.topo.single.breaker != nil || s.BreakerState() != BreakerClosed {
		t.Errorf("WithoutBreaker: %v, %v", s.e.topo.single.breaker, err)
	}
}
