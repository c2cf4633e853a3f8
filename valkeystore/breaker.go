package valkeystore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/valkey-io/valkey-go"
)

// ErrCircuitOpen is the error of every call made while the Store's circuit
// breaker is open: the call was refused without touching the network. It
// wraps sluice.ErrStoreUnavailable, and the error a call returns also wraps
// the last failure that opened the breaker.
var ErrCircuitOpen error = errCircuitOpen{}

type errCircuitOpen struct{}

func (errCircuitOpen) Error() string { return "valkeystore: circuit breaker open" }
func (errCircuitOpen) Unwrap() error { return sluice.ErrStoreUnavailable }

// Breaker configures the Store's circuit breaker, which is on by default
// with the defaults below. Zero fields take their defaults.
//
// The breaker counts consecutive failed calls: network errors (connection
// refused or reset, a failed dial), timeouts (the context's deadline passed
// before Valkey answered), and the replies by which a server says it cannot
// serve at all (LOADING, BUSY, MASTERDOWN, CLUSTERDOWN). Any other reply
// counts as a success, errors included: WRONGTYPE, a script error or OOM
// under maxmemory-policy noeviction mean the server answered at once, and
// refusing calls would only hide when it recovers. A call whose context was
// canceled by its caller counts as neither.
//
// After Failures consecutive failures the breaker opens: Do and Delete fail
// at once with an error wrapping ErrCircuitOpen, so the limiters decide by
// their fail mode in microseconds instead of each waiting for its timeout,
// and a dead or hung Valkey is not sent the request rate. A single
// background goroutine then PINGs Valkey (every primary of a cluster), first
// after MinProbeInterval, then with a wait doubling up to MaxProbeInterval.
// When Valkey answers, the breaker turns half-open and the probe ends: the
// next call goes to Valkey as a trial while the others still fail fast. A
// trial that succeeds closes the breaker; one that fails opens it again and
// starts a new probe. No goroutine runs while the breaker is closed or
// half-open, and the probe also ends when the Store is garbage collected.
//
// The breaker is one per Store. On a cluster with one primary down, calls
// to the other primaries keep succeeding, so the breaker rarely opens;
// calls to the dead primary are still bounded by the limiters' timeouts.
type Breaker struct {
	// Failures is the number of consecutive failed calls that opens the
	// breaker (default 5). Fewer open it sooner on a dead server, but also
	// on a short blip; during an outage every call up to that number waits
	// for its timeout.
	Failures int

	// MinProbeInterval is the wait before the first probe after the breaker
	// opens (default 10ms); each failed probe doubles the wait.
	MinProbeInterval time.Duration

	// MaxProbeInterval bounds the wait between two probes (default 250ms),
	// and so the time Valkey may be back before the breaker notices. Longer
	// is gentler on a server that struggles to come back. Waits are
	// jittered by up to a fifth, so that many processes do not probe in step.
	MaxProbeInterval time.Duration

	// ProbeTimeout bounds one probe (default 500ms). A probe of a hung
	// server waits that long before the next wait begins.
	ProbeTimeout time.Duration

	// OnStateChange, if set, is called with the new state at every
	// transition, in order, for logs and metrics. It must be fast and must
	// not call the Store.
	OnStateChange func(BreakerState)
}

// Breaker defaults.
const (
	DefaultBreakerFailures         = 5
	DefaultBreakerMinProbeInterval = 10 * time.Millisecond
	DefaultBreakerMaxProbeInterval = 250 * time.Millisecond
	DefaultBreakerProbeTimeout     = 500 * time.Millisecond
)

// WithBreaker configures the circuit breaker (see Breaker; it is on by
// default with the default Breaker).
func WithBreaker(b Breaker) Option {
	return func(s *Store) {
		if s.breaker == nil {
			s.breaker = &breaker{}
		}
		s.breaker.cfg = b
	}
}

// WithoutBreaker turns the circuit breaker off: every call goes to Valkey
// and, while Valkey is down or hung, waits for its timeout.
func WithoutBreaker() Option {
	return func(s *Store) { s.breaker = nil }
}

// BreakerState is the state of a Store's circuit breaker.
type BreakerState int32

const (
	// BreakerClosed: calls go to Valkey (also the state of a Store without
	// a breaker).
	BreakerClosed BreakerState = iota
	// BreakerOpen: calls fail at once with ErrCircuitOpen while a probe
	// waits for Valkey to answer.
	BreakerOpen
	// BreakerHalfOpen: Valkey answered a probe; the next call is a trial,
	// the others fail at once.
	BreakerHalfOpen
)

// String returns "closed", "open" or "half-open".
func (st BreakerState) String() string {
	switch st {
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	default:
		return "closed"
	}
}

// BreakerState returns the state of the circuit breaker, for health checks
// and metrics.
func (s *Store) BreakerState() BreakerState {
	if s.breaker == nil {
		return BreakerClosed
	}
	return BreakerState(s.breaker.state.Load())
}

// breaker is the circuit breaker of one Store. A nil *breaker is off: its
// methods let every call through.
//
// The hot path (closed, no failures) is two atomic loads per call; the
// mutex is taken only on transitions and in the half-open state.
type breaker struct {
	cfg    Breaker
	client valkey.Client // for the probe, which must not hold the Store
	done   chan struct{} // closed when the Store is garbage collected

	state   atomic.Int32              // a BreakerState
	fails   atomic.Int32              // consecutive failures while closed
	openErr atomic.Pointer[openError] // the error of refused calls

	mu    sync.Mutex
	trial bool // half-open: the trial call is in flight
}

type openError struct{ err error }

// init applies the defaults and checks the configuration of the breaker of
// s, and arranges for its probe to end when s is garbage collected.
func (b *breaker) init(s *Store) error {
	if b == nil {
		return nil
	}
	c := &b.cfg
	if c.Failures == 0 {
		c.Failures = DefaultBreakerFailures
	}
	if c.MinProbeInterval == 0 {
		c.MinProbeInterval = DefaultBreakerMinProbeInterval
	}
	if c.MaxProbeInterval == 0 {
		c.MaxProbeInterval = max(DefaultBreakerMaxProbeInterval, c.MinProbeInterval)
	}
	if c.ProbeTimeout == 0 {
		c.ProbeTimeout = DefaultBreakerProbeTimeout
	}
	switch {
	case c.Failures < 0:
		return fmt.Errorf("valkeystore: breaker failures must be positive, got %d", c.Failures)
	case c.MinProbeInterval < 0 || c.MaxProbeInterval < c.MinProbeInterval:
		return fmt.Errorf("valkeystore: breaker probe intervals must satisfy 0 <= min <= max, got %v and %v", c.MinProbeInterval, c.MaxProbeInterval)
	case c.ProbeTimeout < 0:
		return fmt.Errorf("valkeystore: breaker probe timeout must be positive, got %v", c.ProbeTimeout)
	}
	b.client = s.client
	b.done = make(chan struct{})
	runtime.AddCleanup(s, func(done chan struct{}) { close(done) }, b.done)
	return nil
}

// allow reports whether a call may go to Valkey: nil, and trial set when
// the call is the half-open trial (whose outcome record must then be
// told). Otherwise it returns the error of the open breaker.
func (b *breaker) allow() (trial bool, err error) {
	if b == nil {
		return false, nil
	}
	switch BreakerState(b.state.Load()) {
	case BreakerClosed:
		return false, nil
	case BreakerOpen:
		return false, b.openErr.Load().err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch BreakerState(b.state.Load()) {
	case BreakerClosed:
		return false, nil
	case BreakerHalfOpen:
		if !b.trial {
			b.trial = true
			return true, nil
		}
	}
	return false, b.openErr.Load().err
}

// record takes the outcome of a call allow let through: the replies of its
// pipelined commands, made under ctx.
func (b *breaker) record(ctx context.Context, trial bool, resps []valkey.ValkeyResult) {
	if b == nil {
		return
	}
	out, cause := outcomeOf(ctx, resps)
	if trial {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.trial = false
		switch out {
		case succeeded:
			b.fails.Store(0)
			b.setLocked(BreakerClosed)
		case failed:
			b.openLocked(cause)
		}
		// neutral: stay half-open; the next call is the trial.
		return
	}
	switch out {
	case succeeded:
		if b.fails.Load() != 0 {
			b.fails.Store(0)
		}
	case failed:
		if b.fails.Add(1) < int32(b.cfg.Failures) {
			return
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		// Calls that began before the breaker opened may end after: only
		// the first to reach the threshold opens it.
		if BreakerState(b.state.Load()) == BreakerClosed && b.fails.Load() >= int32(b.cfg.Failures) {
			b.openLocked(cause)
		}
	}
}

// openLocked opens the breaker and starts the probe. b.mu is held, and no
// probe runs (the breaker was closed or half-open).
func (b *breaker) openLocked(cause error) {
	var err error
	if BreakerState(b.state.Load()) == BreakerHalfOpen {
		err = fmt.Errorf("%w again after a failed trial: %w", ErrCircuitOpen, cause)
	} else {
		err = fmt.Errorf("%w after %d consecutive failures, the last: %w", ErrCircuitOpen, b.fails.Load(), cause)
	}
	b.openErr.Store(&openError{err})
	b.setLocked(BreakerOpen)
	go b.probe()
}

func (b *breaker) setLocked(st BreakerState) {
	if BreakerState(b.state.Swap(int32(st))) != st && b.cfg.OnStateChange != nil {
		b.cfg.OnStateChange(st)
	}
}

// probe PINGs Valkey with backoff until it answers, then turns the breaker
// half-open and returns. It also returns, closing the breaker, when the
// client is closed (calls then fail with the client's own error), and when
// the Store is garbage collected.
func (b *breaker) probe() {
	wait := b.cfg.MinProbeInterval
	timer := time.NewTimer(jitter(wait))
	defer timer.Stop()
	for {
		select {
		case <-b.done:
			return
		case <-timer.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.ProbeTimeout)
		err := ping(ctx, b.client)
		cancel()
		if err == nil || errors.Is(err, valkey.ErrClosing) {
			b.mu.Lock()
			if err == nil {
				b.setLocked(BreakerHalfOpen)
			} else {
				b.fails.Store(0)
				b.setLocked(BreakerClosed)
			}
			b.mu.Unlock()
			return
		}
		wait = min(2*wait, b.cfg.MaxProbeInterval)
		timer.Reset(jitter(wait))
	}
}

// ping PINGs every node of c (every primary of a cluster).
func ping(ctx context.Context, c valkey.Client) error {
	for addr, n := range c.Nodes() {
		if err := n.Do(ctx, n.B().Ping().Build()).Error(); err != nil {
			return fmt.Errorf("valkeystore: ping %s: %w", addr, err)
		}
	}
	return nil
}

// jitter returns d less up to a fifth of it, at random.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d - rand.N(d/5+1)
}

type outcome uint8

const (
	neutral   outcome = iota // says nothing about Valkey's health
	succeeded                // Valkey answered
	failed                   // Valkey did not answer, or cannot serve
)

// outcomeOf classifies a call by its replies: failed if any failed (with
// that error), else succeeded if any was answered.
func outcomeOf(ctx context.Context, resps []valkey.ValkeyResult) (outcome, error) {
	out := neutral
	for _, r := range resps {
		err := r.Error()
		switch classify(ctx, err) {
		case failed:
			return failed, err
		case succeeded:
			out = succeeded
		}
	}
	return out, nil
}

// classify tells whether err, the error of one command sent under ctx,
// shows Valkey unavailable.
func classify(ctx context.Context, err error) outcome {
	if err == nil {
		return succeeded
	}
	if verr, ok := valkey.IsValkeyErr(err); ok {
		msg := verr.Error()
		if verr.IsLoading() || verr.IsClusterDown() || strings.HasPrefix(msg, "BUSY ") || strings.HasPrefix(msg, "MASTERDOWN") {
			return failed
		}
		return succeeded // WRONGTYPE, OOM, NOSCRIPT, a script error: Valkey answered
	}
	if errors.Is(err, valkey.ErrClosing) {
		return neutral // the client was closed by its owner
	}
	if errors.Is(err, context.Canceled) && errors.Is(ctx.Err(), context.Canceled) {
		return neutral // the caller gave up, not Valkey
	}
	return failed // timeout, refused, reset, EOF, dial error
}

// Guarded calls. valkey-go (v1.0.79) does not always return by the
// context's deadline: when a new connection's handshake times out against
// a server that accepts and never answers (paused, hung, a black hole),
// closing that connection may block for about a second. A connection is
// made anew only after one failed, so while the breaker has seen a failure
// (and for the half-open trial) calls run on a goroutine of their own and
// return when the context ends; the goroutine ends when valkey-go returns.
// Healthy calls go straight to the client.

// suspect reports whether calls must be guarded.
func (b *breaker) suspect(ctx context.Context, trial bool) bool {
	return b != nil && ctx.Done() != nil && (trial || b.fails.Load() != 0)
}

// do is c.Do(ctx, cmd), guarded while Valkey is suspect.
func (b *breaker) do(ctx context.Context, c valkey.Client, trial bool, cmd valkey.Completed) valkey.ValkeyResult {
	if !b.suspect(ctx, trial) {
		return c.Do(ctx, cmd)
	}
	ch := make(chan valkey.ValkeyResult, 1)
	go func() { ch <- c.Do(ctx, cmd) }()
	select {
	case r := <-ch:
		return r
	case <-ctx.Done():
		return valkey.NewErrorResult(ctx.Err())
	}
}

// doMulti is c.DoMulti(ctx, cmds...), guarded while Valkey is suspect.
func (b *breaker) doMulti(ctx context.Context, c valkey.Client, trial bool, cmds valkey.Commands) []valkey.ValkeyResult {
	if !b.suspect(ctx, trial) {
		return c.DoMulti(ctx, cmds...)
	}
	ch := make(chan []valkey.ValkeyResult, 1)
	go func() { ch <- c.DoMulti(ctx, cmds...) }()
	select {
	case r := <-ch:
		return r
	case <-ctx.Done():
		out := make([]valkey.ValkeyResult, len(cmds))
		for i := range out {
			out[i] = valkey.NewErrorResult(ctx.Err())
		}
		return out
	}
}
