package valkeystore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/valkey-io/valkey-go"
)

// ErrCircuitOpen is the error of every call made while the circuit breaker
// of the call's node is open: the call was refused without touching the
// network. It wraps sluice.ErrStoreUnavailable, and the error a call
// returns also wraps the last failure that opened the breaker.
var ErrCircuitOpen error = errCircuitOpen{}

type errCircuitOpen struct{}

func (errCircuitOpen) Error() string { return "valkeystore: circuit breaker open" }
func (errCircuitOpen) Unwrap() error { return sluice.ErrStoreUnavailable }

// Breaker configures the Store's circuit breakers, which are on by default
// with the defaults below. Zero fields take their defaults.
//
// There is one breaker per node: the server of a standalone client (or the
// master a Sentinel client follows), and each primary of a cluster, which
// guards the decisions whose slots that primary serves. A dead primary
// opens only its own breaker; decisions on the other primaries go on.
//
// A breaker counts consecutive failed calls: network errors (connection
// refused or reset, a failed dial), timeouts (the decision's deadline
// passed before Valkey answered, or before a new connection's handshake
// ended), and the replies by which a server says it cannot serve at all
// (LOADING, BUSY, MASTERDOWN, CLUSTERDOWN). Any
// other reply counts as a success, errors included: WRONGTYPE, a script
// error or OOM under maxmemory-policy noeviction mean the server answered
// at once, and refusing calls would only hide when it recovers. A call
// whose context was canceled by its caller counts as neither.
//
// After Failures consecutive failures the breaker opens: decisions on its
// node fail at once with an error wrapping ErrCircuitOpen, so the limiters
// decide by their fail mode in microseconds instead of each waiting for
// its timeout, and a dead or hung node is not sent the request rate.
//
// A timeout shows the node too slow for that call's deadline, not for a
// longer one: each limiter has its own timeout (sluice.WithTimeout), and a
// node that takes 100ms is dead to a 50ms limiter and healthy to a 1s one.
// So a breaker opened by timeouts refuses only the calls whose time left
// is not clearly more (twice as much) than that of the calls that timed
// out; a call with more time goes to Valkey, and if it times out too, the
// bar rises to its time.
// A breaker opened by any other failure refuses every call.
//
// While a breaker is open, a single background goroutine probes its node,
// first after MinProbeInterval, then with a wait doubling up to
// MaxProbeInterval. A probe PINGs a standalone server; on a cluster it
// reads the slot map again and asks one of the node's slots, through the
// cluster client (so a replica promoted in the node's place answers), and
// when the node serves no slot any more the breaker closes. When the node
// answers, the breaker turns half-open and the probe ends: the next call
// goes to Valkey as a trial while the others still fail fast. A trial that
// succeeds closes the breaker; one that fails opens it again and starts a
// new probe. No goroutine runs while the breakers are closed or half-open,
// and the probes also end when the Store is garbage collected.
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

	// OnStateChange, if set, is called with the node (its address) and its
	// new state at every transition of that node's breaker, in order, for
	// logs and metrics. It must be fast and must not call the Store.
	OnStateChange func(node string, st BreakerState)
}

// Breaker defaults.
const (
	DefaultBreakerFailures         = 5
	DefaultBreakerMinProbeInterval = 10 * time.Millisecond
	DefaultBreakerMaxProbeInterval = 250 * time.Millisecond
	DefaultBreakerProbeTimeout     = 500 * time.Millisecond
)

// WithBreaker configures the circuit breakers (see Breaker; they are on by
// default with the default Breaker).
func WithBreaker(b Breaker) Option {
	return optionFunc(func(e *engine) { e.breakerCfg = &b })
}

// WithoutBreaker turns the circuit breakers off: every call goes to Valkey
// and, while a node is down or hung, waits for its timeout (the deadline
// layer still returns every call by its deadline).
func WithoutBreaker() Option {
	return optionFunc(func(e *engine) { e.breakerCfg = nil })
}

// BreakerState is the state of a circuit breaker.
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

// BreakerState returns the worst state among the Store's breakers (open,
// then half-open, then closed), for health checks. Breakers gives them
// per node.
func (s *Store) BreakerState() BreakerState {
	worst := BreakerClosed
	for _, st := range s.Breakers() {
		if st == BreakerOpen || st == BreakerHalfOpen && worst == BreakerClosed {
			worst = st
		}
	}
	return worst
}

// Breakers returns the state of the breaker of every node that serves
// slots, by node address (one node for a standalone client), for metrics.
// It is empty when the breakers are off.
func (s *Store) Breakers() map[string]BreakerState {
	out := make(map[string]BreakerState)
	for _, n := range s.e.nodes() {
		if n.breaker != nil && s.e.reportsBreaker(n) {
			out[n.name] = BreakerState(n.breaker.state.Load())
		}
	}
	return out
}

// reportsBreaker reports whether Breakers shows the breaker of n: n serves
// slots (a standalone client's one node serves every slot), or its breaker
// is not closed.
func (e *engine) reportsBreaker(n *node) bool {
	_, serves := e.slotsOf(n)
	return serves || n == e.topo.single || BreakerState(n.breaker.state.Load()) != BreakerClosed
}

// initBreaker applies the defaults to c and checks it.
func initBreaker(c *Breaker) error {
	breakerDefaults(c)
	return checkBreaker(c)
}

// breakerDefaults sets c's unset fields to their defaults.
func breakerDefaults(c *Breaker) {
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
}

// checkBreaker refuses a configuration out of range.
func checkBreaker(c *Breaker) error {
	switch {
	case c.Failures < 0:
		return fmt.Errorf("valkeystore: breaker failures must be positive, got %d", c.Failures)
	case c.MinProbeInterval < 0 || c.MaxProbeInterval < c.MinProbeInterval:
		return fmt.Errorf("valkeystore: breaker probe intervals must satisfy 0 <= min <= max, got %v and %v", c.MinProbeInterval, c.MaxProbeInterval)
	case c.ProbeTimeout < 0:
		return fmt.Errorf("valkeystore: breaker probe timeout must be positive, got %v", c.ProbeTimeout)
	}
	return nil
}

// breaker is the circuit breaker of one node. A nil *breaker is off: its
// methods let every call through.
//
// The hot path (closed, no failures) is two atomic loads per call; the
// mutex is taken only on transitions and in the half-open state.
type breaker struct {
	cfg *Breaker
	n   *node // for the probe, which must not hold the Store

	state     atomic.Int32              // a BreakerState
	fails     atomic.Int32              // consecutive failures while closed
	failLevel atomic.Int64              // the largest budget among them (hard: any failure but a timeout)
	level     atomic.Int64              // open, half-open: calls with a larger budget go through
	openErr   atomic.Pointer[openError] // the error of refused calls

	mu    sync.Mutex
	trial bool // half-open: the trial call is in flight
}

type openError struct{ err error }

// hard is the level of failures other than timeouts: no budget is above it.
const hard = math.MaxInt64

// A pass says how a call got through its breaker.
type pass uint8

const (
	normal pass = iota // closed
	trial              // half-open: the trial
	above              // open or half-open, but the call has more time than those that timed out
)

func newBreaker(cfg *Breaker, n *node) *breaker {
	return &breaker{cfg: cfg, n: n}
}

// budgetOf returns the time left until dl (hard when zero: no deadline).
func budgetOf(dl time.Time) int64 {
	if dl.IsZero() {
		return hard
	}
	return int64(time.Until(dl))
}

// allow reports whether a call with budget (its time left) may go to
// Valkey, and how (record must then be told its outcome). Otherwise it
// returns the error of the open breaker.
func (b *breaker) allow(budget int64) (pass, error) {
	if b == nil {
		return normal, nil
	}
	switch BreakerState(b.state.Load()) {
	case BreakerClosed:
		return normal, nil
	case BreakerOpen:
		return b.aboveOrOpen(budget)
	}
	return b.allowHalfOpen(budget)
}

// allowHalfOpen is allow when the breaker was seen half-open: the first
// call is the trial.
func (b *breaker) allowHalfOpen(budget int64) (pass, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch BreakerState(b.state.Load()) {
	case BreakerClosed:
		return normal, nil
	case BreakerHalfOpen:
		if !b.trial {
			b.trial = true
			return trial, nil
		}
	}
	return b.aboveOrOpen(budget)
}

// aboveOrOpen lets a call with budget through when it exceeds the level
// of the failures, and refuses it with the open breaker's error otherwise.
func (b *breaker) aboveOrOpen(budget int64) (pass, error) {
	if exceeds(budget, b.level.Load()) {
		return above, nil
	}
	return normal, b.openErr.Load().err
}

// exceeds reports whether budget is clearly more than level: twice as
// much. The time left of calls made with one timeout varies with when
// they are sent (a loaded machine stalls); only a longer timeout gets
// through.
func exceeds(budget, level int64) bool {
	return level != hard && budget > 2*level
}

// record takes the outcome of a call allow let through with p: the replies
// of its pipelined commands, made under ctx with budget.
func (b *breaker) record(ctx context.Context, p pass, budget int64, resps []valkey.ValkeyResult) {
	if b == nil {
		return
	}
	out, cause, timedOut := outcomeOf(ctx, resps)
	lvl := failureLevel(timedOut, budget)
	switch p {
	case trial:
		b.recordTrial(out, cause, lvl)
	case above:
		if out == failed {
			raise(&b.level, lvl)
		}
	default:
		b.recordClosed(out, cause, lvl)
	}
}

// failureLevel is the level of a failure: the call's budget when it timed
// out, hard otherwise.
func failureLevel(timedOut bool, budget int64) int64 {
	if timedOut {
		return budget
	}
	return hard
}

// recordTrial takes the outcome of the half-open breaker's trial, which
// failed at level lvl with cause or succeeded.
func (b *breaker) recordTrial(out outcome, cause error, lvl int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.trial = false
	switch out {
	case succeeded:
		b.resetFails()
		b.setLocked(BreakerClosed)
	case failed:
		// A trial's time left may be short by a stall: it does not
		// lower the bar that the failures before it set, unless those
		// were hard failures the probe has since seen pass.
		if prev := b.level.Load(); prev != hard {
			lvl = max(lvl, prev)
		}
		b.level.Store(lvl)
		b.openLocked(cause)
	}
	// neutral: stay half-open; the next call is the trial.
}

// recordClosed takes the outcome of a call the closed breaker let through.
func (b *breaker) recordClosed(out outcome, cause error, lvl int64) {
	switch out {
	case succeeded:
		if b.fails.Load() != 0 {
			b.resetFails()
		}
	case failed:
		b.fail(cause, lvl)
	}
}

// fail counts a failure at level lvl, opening the breaker at the
// threshold.
func (b *breaker) fail(cause error, lvl int64) {
	raise(&b.failLevel, lvl)
	if b.fails.Add(1) < int32(b.cfg.Failures) {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	// Calls that began before the breaker opened may end after: only
	// the first to reach the threshold opens it.
	if BreakerState(b.state.Load()) == BreakerClosed && b.fails.Load() >= int32(b.cfg.Failures) {
		b.level.Store(b.failLevel.Load())
		b.openLocked(cause)
	}
}

// resetFails forgets the failures counted while closed.
func (b *breaker) resetFails() {
	b.fails.Store(0)
	b.failLevel.Store(0)
}

// raise sets v to x if x is larger.
func raise(v *atomic.Int64, x int64) {
	for {
		old := v.Load()
		if x <= old || v.CompareAndSwap(old, x) {
			return
		}
	}
}

// openLocked opens the breaker and starts the probe. b.mu is held, and no
// probe runs (the breaker was closed or half-open).
func (b *breaker) openLocked(cause error) {
	var err error
	if BreakerState(b.state.Load()) == BreakerHalfOpen {
		err = fmt.Errorf("%w (node %s) again after a failed trial: %w", ErrCircuitOpen, b.n.name, cause)
	} else {
		err = fmt.Errorf("%w (node %s) after %d consecutive failures, the last: %w", ErrCircuitOpen, b.n.name, b.fails.Load(), cause)
	}
	b.openErr.Store(&openError{err})
	b.setLocked(BreakerOpen)
	go b.probe()
}

func (b *breaker) setLocked(st BreakerState) {
	if BreakerState(b.state.Swap(int32(st))) != st && b.cfg.OnStateChange != nil {
		b.cfg.OnStateChange(b.n.name, st)
	}
}

// probe asks the node with backoff until it answers, then turns the
// breaker half-open and returns. It also returns, closing the breaker,
// when the node serves no slot any more, when the client is closed (calls
// then fail with the client's own error), and when the Store is garbage
// collected.
func (b *breaker) probe() {
	wait := b.cfg.MinProbeInterval
	timer := time.NewTimer(jitter(wait))
	defer timer.Stop()
	for {
		select {
		case <-b.n.e.done:
			return
		case <-timer.C:
		}
		if b.probeOnce() {
			return
		}
		wait = min(2*wait, b.cfg.MaxProbeInterval)
		timer.Reset(jitter(wait))
	}
}

// probeOnce asks the node once, and reports whether the probe is over:
// the node answered (the breaker turns half-open), serves no slot, or the
// client is closed (the breaker closes).
func (b *breaker) probeOnce() bool {
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.ProbeTimeout)
	gone, err := b.ask(ctx)
	cancel()
	if err != nil && !gone && !errors.Is(err, valkey.ErrClosing) {
		return false
	}
	b.endProbe(err == nil && !gone)
	return true
}

// endProbe turns the breaker half-open when the node answered, and closes
// it otherwise.
func (b *breaker) endProbe(answered bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if answered {
		b.setLocked(BreakerHalfOpen)
		return
	}
	b.resetFails()
	b.setLocked(BreakerClosed)
}

// ask is one probe: whether the node answers, or serves no slot (gone).
func (b *breaker) ask(ctx context.Context) (gone bool, err error) {
	e := b.n.e
	if !e.cluster {
		return false, ping(ctx, e.client)
	}
	e.refresh(ctx) // a failure leaves the map as it was
	return b.n.askSlot(ctx)
}

// ping PINGs every node of c (the server of a standalone client).
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
// the first such error, and whether every failure was a timeout), else
// succeeded if any was answered.
func outcomeOf(ctx context.Context, resps []valkey.ValkeyResult) (out outcome, cause error, timedOut bool) {
	for _, r := range resps {
		err := r.Error()
		switch classify(ctx, err) {
		case failed:
			if out != failed {
				out, cause, timedOut = failed, err, true
			}
			if !ownTimeout(ctx, err) {
				timedOut = false
			}
		case succeeded:
			if out == neutral {
				out = succeeded
			}
		}
	}
	return out, cause, timedOut
}

// ownTimeout reports whether err is the call's own deadline passing: the
// context's error, or a network timeout once that deadline has passed.
// valkey-go makes a new connection's handshake under the context of the
// call that needs it first, with the connection's deadline set to the
// context's, so a call whose time runs out there fails with "i/o
// timeout", not with the context's error. That is a timeout of that call,
// which bars only the calls with no more time than it had, not a network
// failure, which would bar every call.
func ownTimeout(ctx context.Context, err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var nerr net.Error
	if !errors.As(err, &nerr) || !nerr.Timeout() {
		return false
	}
	dl, ok := ctx.Deadline()
	// The connection's deadline and the context's timer are the same
	// instant on two clocks' paths: either may fire first.
	return ok && !time.Now().Before(dl)
}

// classify tells whether err, the error of one command sent under ctx,
// shows Valkey unavailable.
func classify(ctx context.Context, err error) outcome {
	if err == nil {
		return succeeded
	}
	if verr, ok := valkey.IsValkeyErr(err); ok {
		return classifyReply(verr)
	}
	if saysNothing(ctx, err) {
		return neutral
	}
	return failed // timeout, refused, reset, EOF, dial error
}

// classifyReply tells whether verr, an error reply, shows Valkey
// unavailable.
func classifyReply(verr *valkey.ValkeyError) outcome {
	msg := verr.Error()
	if verr.IsLoading() || verr.IsClusterDown() || strings.HasPrefix(msg, "BUSY ") || strings.HasPrefix(msg, "MASTERDOWN") {
		return failed
	}
	return succeeded // WRONGTYPE, OOM, NOSCRIPT, a script error: Valkey answered
}

// saysNothing reports whether err, the error of a command sent under ctx
// that got no reply, says nothing about Valkey's health.
func saysNothing(ctx context.Context, err error) bool {
	switch {
	case errors.Is(err, valkey.ErrClosing):
		return true // the client was closed by its owner
	case notReplicated(err):
		return true // the primary answered; its replicas were late
	case errors.Is(err, context.Canceled) && errors.Is(ctx.Err(), context.Canceled):
		return true // the caller gave up, not Valkey
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		// Not this call's deadline: valkey-go closes a connection on which
		// another call's deadline passed (unless AlwaysPipelining), failing
		// the calls that shared it. That call's timeout is counted.
		return true
	}
	return false
}
