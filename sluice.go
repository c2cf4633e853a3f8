package sluice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/driver"
)

// FailMode says what a limiter decides when its store cannot.
type FailMode uint8

const (
	// FailOpen allows requests while the store is unavailable: the right
	// choice for general API limits, where an outage of the limiter should
	// not become an outage of the API.
	FailOpen FailMode = iota
	// FailClosed refuses requests while the store is unavailable: the right
	// choice for logins, password resets, one-time codes and expensive paid
	// calls, where an unlimited window is an attack.
	FailClosed
)

// String returns "open", "closed" or "share".
func (m FailMode) String() string {
	switch m {
	case FailClosed:
		return "closed"
	case FailShare:
		return "share"
	}
	return "open"
}

// DefaultTimeout is the default time a decision may take in the store before
// the fail mode decides instead.
const DefaultTimeout = 50 * time.Millisecond

// An Option configures a Limiter.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	name       string
	nameSet    bool
	prefix     string
	clock      func() time.Time
	failMode   FailMode
	timeout    time.Duration
	shadow     bool
	logger     *slog.Logger
	observer   Observer
	deny       int8 // WithDenyCache: 0 by default, 1 on, -1 off
	plans      []namedPolicy
	ovOn       bool
	rsvOn      bool           // WithReservations
	rsv        ReserveOptions // see reserve.go
	warn       int            // WithWarning's percent, 0 for none
	warnSet    bool
	penalty    Penalty // WithPenalty; see penalty.go
	penaltySet bool
	grantOn    bool         // WithGrants
	grant      GrantOptions // see grants.go
}

// WithName names the limiter. The name is part of every key, so limiters
// that share a store must have distinct names unless they are meant to share
// state. It holds 1 to 64 of [A-Za-z0-9_.-]. By default the name is derived
// from the policy, such as "gcra-20-200000": limiters with identical
// policies then share state, and changing a policy starts from fresh state.
func WithName(name string) Option {
	return optionFunc(func(c *config) { c.name, c.nameSet = name, true })
}

// WithPrefix sets the first part of every key (default DefaultPrefix,
// "rl:v1"). Use it to keep several applications apart on one Valkey.
func WithPrefix(prefix string) Option {
	return optionFunc(func(c *config) { c.prefix = prefix })
}

// WithClock makes the limiter decide at the times now returns instead of the
// store's clock. By default Valkey's TIME decides, so application servers
// with skewed clocks agree; a client clock is for tests and simulations.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *config) { c.clock = now })
}

// WithFailMode sets what the limiter decides when the store cannot (default
// FailOpen).
func WithFailMode(m FailMode) Option {
	return optionFunc(func(c *config) { c.failMode = m })
}

// WithTimeout bounds the time a decision may wait for the store (default
// DefaultTimeout, 50ms). A decision that times out is decided by the fail
// mode and never retried: the script may have run, and a retry would count
// twice. Shorter timeouts bound the latency a sick Valkey adds; too short a
// timeout degrades decisions under ordinary load spikes.
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.timeout = d })
}

// WithShadow puts the limiter in shadow mode: every request is allowed, and
// Result.Shadowed reports those the limit would have refused. Use it to
// dark-launch a new limit and watch what it would do.
func WithShadow(on bool) Option {
	return optionFunc(func(c *config) { c.shadow = on })
}

// WithDenyCache turns the local deny cache on or off. Once the store
// refuses a key, the limiter answers later requests for that key locally,
// without a round trip, while the store's answer follows from that refusal
// (the same Result, every field); other requests go to the store. A client
// hammering a refused key costs the store nothing.
//
// By default it is on when the store is a driver.DeleteNotifier (valkeystore,
// memstore), and off otherwise. On a DeleteNotifier a Reset made by any
// process reaches the cache: it answers only while the store's notices
// reach it, and drops the key when the notice arrives (on valkeystore,
// within valkeystore.NoticeBound of the reset). On a store that is not
// one, a Reset by another process is invisible to the cache, which keeps
// refusing the key until the refusal's RetryAfter ends (up to a window: a
// day for a daily quota): turn it on there only if that is acceptable. An
// AllowAll refund made by another process is not seen either (the cache
// then refuses for at most the RetryAfter the store gave). New refuses
// WithDenyCache(true) for a policy with CountRejected (refusals must reach
// the store to be counted), plans or overrides (which another process may
// change at any time): those never use the cache.
func WithDenyCache(on bool) Option {
	return optionFunc(func(c *config) {
		c.deny = -1
		if on {
			c.deny = 1
		}
	})
}

// WithLogger sets where store errors are logged (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// An Observer is told of every decision a limiter makes, for metrics.
// ObserveDecision must be fast and safe for concurrent use; package
// sluiceprom implements it for Prometheus.
type Observer interface {
	// ObserveDecision reports a decision of the limiter named limiter. err
	// is the store's error when the decision was Degraded; latency is the
	// time the limiter spent deciding (store round trip included).
	ObserveDecision(limiter string, res Result, err error, latency time.Duration)
}

// WithObserver reports every decision to o (default none).
func WithObserver(o Observer) Option {
	return optionFunc(func(c *config) { c.observer = o })
}

// A Limiter decides, for any number of keys, whether events may happen now
// under one policy. It is safe for concurrent use.
//
// Use Allow for one event, AllowN for an event that costs several units,
// Peek to look without taking, Wait to block until allowed, and Reset to
// forget a key (unlock a user).
type Limiter struct {
	store driver.Store
	rule  Rule
	cfg   config

	lastLog atomic.Int64          // unix nanoseconds of the last store-error log
	deny    *denyCache            // nil when off
	notify  driver.DeleteNotifier // the store, when it is one
	plans   map[string]Rule
	ovs     driver.OverrideStore // nil unless WithOverrides
	cobs    ContextObserver      // the observer, when it is one
	rsv     *reservations        // nil unless WithReservations; see reserve.go
	// transient: the store is a driver.TransientKeys and no ContextObserver
	// keeps the keys, so a lone decision's key is passed in the pooled
	// buffer of its Op (see opKey).
	transient bool
	gr        *grants // nil unless WithGrants; see grants.go
}

// New returns a Limiter enforcing policy on store. It fails with an error
// wrapping ErrInvalidPolicy when the policy or an option cannot be enforced,
// before any traffic.
func New(store driver.Store, policy Policy, opts ...Option) (*Limiter, error) {
	if err := checkStore(store); err != nil {
		return nil, err
	}
	if policy == nil {
		return nil, invalidField("policy", "nil policy")
	}
	rule, err := policy.Rule()
	if err != nil {
		return nil, err
	}
	cfg := config{prefix: DefaultPrefix, timeout: DefaultTimeout}
	for _, o := range opts {
		o.apply(&cfg)
	}
	if !cfg.nameSet {
		cfg.name = defaultName(rule)
	}
	if err := checkName(cfg.name); err != nil {
		return nil, err
	}
	if err := checkPrefix(cfg.prefix); err != nil {
		return nil, err
	}
	if cfg.timeout <= 0 {
		return nil, invalidField("WithTimeout", "timeout must be positive, got %v", cfg.timeout)
	}
	if err := checkFailMode(cfg.failMode); err != nil {
		return nil, err
	}
	if err := checkWarning(&cfg); err != nil {
		return nil, err
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	l := &Limiter{store: store, rule: rule, cfg: cfg}
	if err := checkInFlightOptions(rule, &cfg); err != nil {
		return nil, err
	}
	if l.plans, err = buildPlans(rule, cfg.plans); err != nil {
		return nil, err
	}
	if cfg.ovOn {
		ovs, ok := store.(driver.OverrideStore)
		if !ok {
			return nil, invalidField("WithOverrides", "WithOverrides: store %T keeps no overrides (it does not implement driver.OverrideStore)", store)
		}
		l.ovs = ovs
	}
	if err := l.setPenaltyAndReservations(); err != nil {
		return nil, err
	}
	if err := l.setGrants(); err != nil {
		return nil, err
	}
	l.notify, _ = store.(driver.DeleteNotifier)
	l.cobs, _ = cfg.observer.(ContextObserver)
	l.transient = transientKeys(store, l.cobs)
	if err := l.setDenyCache(); err != nil {
		return nil, err
	}
	return l, nil
}

// checkFailMode refuses an unknown fail mode.
func checkFailMode(m FailMode) error {
	switch m {
	case FailOpen, FailClosed, FailShare:
		return nil
	}
	return invalidField("WithFailMode", "unknown fail mode %d", m)
}

// checkStore refuses a store New cannot decide with: nil, a typed nil, or
// one AllowAll cannot group checks by.
func checkStore(store driver.Store) error {
	if store == nil {
		return invalidField("store", "nil store")
	}
	if v := reflect.ValueOf(store); nillable[v.Kind()] && v.IsNil() {
		// Such as a nil *valkeystore.Store from a valkeystore.New that
		// failed: it would panic on the first decision.
		return invalidField("store", "store is a nil %T", store)
	}
	if !reflect.TypeOf(store).Comparable() {
		// AllowAll groups checks by store with ==.
		return invalidField("store", "store of type %T is not comparable: pass a pointer", store)
	}
	return nil
}

// setDenyCache gives l a deny cache when WithDenyCache(true) asks for one
// (refusing it where it cannot apply), or by default on a store that
// notifies deletes, where it can.
func (l *Limiter) setDenyCache() error {
	rule, cfg := l.rule, &l.cfg
	if cfg.deny == 1 {
		switch {
		case rule.CountRejected:
			return invalidField("WithDenyCache", "WithDenyCache(true): a policy with CountRejected never uses the deny cache (refused requests must reach the store to be counted)")
		case len(l.plans) > 0:
			return invalidField("WithDenyCache", "WithDenyCache(true): a limiter with plans never uses the deny cache (a refusal under one plan says nothing of another)")
		case l.ovs != nil:
			return invalidField("WithDenyCache", "WithDenyCache(true): a limiter with overrides never uses the deny cache (an override set by another process must apply at once)")
		}
	}
	if cfg.deny == 1 || cfg.deny == 0 && l.gr == nil && l.notify != nil && !rule.CountRejected && len(l.plans) == 0 && l.ovs == nil && rule.Algorithm != driver.AlgorithmInFlight {
		l.deny = newDenyCache(rule, l.notify != nil)
		if l.notify != nil {
			// The store holds the cache, never the Limiter: once the
			// Limiter is unreachable, its cleanup stops the watch.
			stop := l.notify.WatchDeletes(cfg.prefix, l.deny)
			runtime.AddCleanup(l, func(stop func()) { stop() }, stop)
		}
	}
	return nil
}

// nillable are the kinds whose nil values reflect.Value.IsNil reports.
var nillable = map[reflect.Kind]bool{reflect.Pointer: true, reflect.Map: true, reflect.Slice: true,
	reflect.Func: true, reflect.Chan: true, reflect.Interface: true, reflect.UnsafePointer: true}

// ready reports an error for a Limiter that New did not make (nil, or the
// zero Limiter), which has no store to decide with.
func (l *Limiter) ready() error {
	if l == nil || l.store == nil {
		return ErrNotCreated
	}
	return nil
}

// Name returns the limiter's name, the second part of its keys ("" for a
// Limiter New did not make).
func (l *Limiter) Name() string {
	if l.ready() != nil {
		return ""
	}
	return l.cfg.name
}

// Rule returns the validated rule the limiter enforces (the zero Rule for a
// Limiter New did not make).
func (l *Limiter) Rule() Rule {
	if l.ready() != nil {
		return Rule{}
	}
	return l.rule
}

// FailMode returns what the limiter decides when the store cannot.
func (l *Limiter) FailMode() FailMode {
	if l.ready() != nil {
		return FailClosed
	}
	return l.cfg.failMode
}

// Shadow reports whether the limiter is in shadow mode (WithShadow): it
// never refuses, and clients should not be shown its limit.
func (l *Limiter) Shadow() bool {
	return l.ready() == nil && l.cfg.shadow
}

// storeKey returns the store key that holds the state of key ("" for a
// Limiter New did not make).
func (l *Limiter) storeKey(key string) string {
	if l.ready() != nil {
		return ""
	}
	return driver.Key(l.cfg.prefix, l.cfg.name, l.rule, key)
}

// Allow reports whether one event may happen now for key, and takes it if
// so. It is AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (Result, error) {
	return l.AllowN(ctx, key, 1)
}

// Peek reports whether one event would be allowed now for key, without
// taking anything.
func (l *Limiter) Peek(ctx context.Context, key string) (Result, error) {
	return l.AllowN(ctx, key, 0)
}

// AllowN reports whether an event of cost n may happen now for key, and
// takes n units if so. A refused request takes nothing (except under
// CountRejected). n = 0 peeks. A negative n, or an n larger than
// the policy's limit (which could never be allowed), is an error wrapping
// ErrInvalidCost.
//
// When the store fails or does not answer within the timeout, the limiter's
// fail mode decides: the Result has Degraded set and the error is nil (the
// store's error is logged). An error is returned only for invalid input,
// for a limiter's clock (WithClock) no store decides at (ErrInvalidTime),
// or when ctx itself ends before the decision.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (Result, error) {
	if err := l.ready(); err != nil {
		return Result{}, err
	}
	return l.allow(ctx, key, l.rule, n)
}

// allow decides under rule r, the policy's or a plan's.
func (l *Limiter) allow(ctx context.Context, key string, r Rule, n int64) (Result, error) {
	if err := l.check(key, r, n); err != nil {
		return Result{}, err
	}
	if l.gr != nil {
		return l.allowGrant(ctx, key, n)
	}
	var buf [192]byte
	k := driver.AppendKey(buf[:0], l.cfg.prefix, l.cfg.name, l.rule, key)
	var seq uint64
	if l.deny != nil {
		// The clock is read only when the cache may answer.
		if l.deny.holds() {
			if res, ok := l.deny.get(k, n, l.mono()); ok {
				return l.local(ctx, k, r, n, res), nil
			}
		}
		seq = l.deny.seq.Load() // before the request is sent
	}
	// The Op comes from a pool: passed to the Store (an interface), a
	// local one would be allocated on the heap for every decision.
	op := opPool.Get().(*loneOp)
	defer putOp(op)
	batch := op.op[:]
	batch[0] = driver.Op{Key: l.opKey(op, k), Rule: r, Cost: n}
	if l.ovs != nil {
		batch[0].Override = l.overrideKey(key)
	}
	l.withPenalty(&batch[0], key)
	var out [1]Result
	if err := l.do(ctx, batch, out[:], seq); err != nil {
		return Result{}, err
	}
	return out[0], nil
}

// A loneOp is the Op of a lone decision, and the buffer of its key when
// the store is a driver.TransientKeys.
type loneOp struct {
	op  [1]driver.Op
	key []byte
}

// opPool holds the Ops of lone decisions between decisions. A Store keeps
// no Op after its Do returns (see Store).
var opPool = sync.Pool{New: func() any { return new(loneOp) }}

// maxPooledKey bounds the key buffer a pooled Op keeps.
const maxPooledKey = 1 << 10

func putOp(op *loneOp) {
	op.op = [1]driver.Op{} // drop the key, rule and error it points to
	if cap(op.key) > maxPooledKey {
		op.key = nil
	}
	opPool.Put(op)
}

// opKey is the Key of a lone decision's Op for the store key k (a buffer
// of the caller's): a copy of k of its own, or on a driver.TransientKeys
// store, k copied into op's buffer (no allocation), which stays op's until
// putOp. The deny cache, which keeps keys, takes a copy (stableKey); a
// ContextObserver, which may keep them, turns this off (New).
func (l *Limiter) opKey(op *loneOp, k []byte) string {
	if !l.transient {
		return string(k)
	}
	op.key = append(op.key[:0], k...)
	return unsafe.String(unsafe.SliceData(op.key), len(op.key))
}

// transientKeys reports whether a limiter on store with the ContextObserver
// cobs (nil for none) may pass keys in a reused buffer (see opKey).
func transientKeys(store driver.Store, cobs ContextObserver) bool {
	_, ok := store.(driver.TransientKeys)
	return ok && cobs == nil
}

// stableKey is key, an Op's Key, as a string that may be kept past the
// decision: a copy when the limiter passes transient keys (opKey).
func (l *Limiter) stableKey(key string) string {
	if l.transient {
		return strings.Clone(key)
	}
	return key
}

// processStart anchors mono's readings of the local clock.
var processStart = time.Now()

// mono returns the limiter's clock in nanoseconds: of the WithClock clock
// since the Unix epoch, or of the local monotonic clock since the process
// started (cheaper than time.Now).
func (l *Limiter) mono() int64 {
	if l.cfg.clock != nil {
		return l.cfg.clock().UnixNano()
	}
	return int64(time.Since(processStart))
}

// monoAt is mono at t, a reading of the local clock just taken.
func (l *Limiter) monoAt(t time.Time) int64 {
	if l.cfg.clock != nil {
		return l.cfg.clock().UnixNano()
	}
	return int64(t.Sub(processStart))
}

// local completes a refusal from the deny cache as finish would.
func (l *Limiter) local(ctx context.Context, k []byte, r Rule, n int64, res Result) Result {
	if l.cfg.shadow {
		res.Allowed, res.Shadowed, res.RetryAfter = true, true, 0
	}
	if l.cobs != nil {
		op := driver.Op{Key: string(k), Rule: r, Cost: n}
		l.observe(ctx, &op, res, AnswerDenyCache, time.Now(), 0)
	} else if l.cfg.observer != nil {
		l.cfg.observer.ObserveDecision(l.cfg.name, res, nil, 0)
	}
	return res
}

func (l *Limiter) check(key string, r Rule, n int64) error {
	if err := l.ready(); err != nil {
		return err
	}
	if key == "" {
		return ErrInvalidKey
	}
	if n < 0 {
		return badCost("cost %d is negative", n)
	}
	if r.Algorithm == driver.AlgorithmInFlight && n != 0 {
		return l.wrongKind("a rate decision")
	}
	if l.ovs != nil {
		// An override may raise the limit: only what no limit allows is
		// refused here.
		if max := maxLimit(r); n > max {
			return badCost("cost %d exceeds the largest limit %v may have (%d)", n, r.Algorithm, max)
		}
		return nil
	}
	if n > r.Limit {
		return badCost("cost %d exceeds the limit %d of %s and could never be allowed", n, r.Limit, l.cfg.name)
	}
	return nil
}

// do runs ops, all of this limiter, and completes their Results into out
// (one per op): Limit, Source, fail mode and shadow mode. It returns an error only when ctx ended or
// the limiter's clock is out of a store's range (see finish). seq is the
// deny cache's, read before the ops were built (see denyCache.put).
func (l *Limiter) do(ctx context.Context, ops []driver.Op, out []Result, seq uint64) error {
	if l.cfg.clock != nil {
		now := l.cfg.clock()
		for i := range ops {
			ops[i].Now = now
		}
	}
	start := time.Now()
	deadline := start.Add(l.cfg.timeout)
	for i := range ops {
		ops[i].Deadline = deadline
	}
	err := l.store.Do(ctx, ops)
	return l.finish(ctx, ops, out, err, start, l.monoAt(start), seq)
}

// finish completes the Results of ops into out (one per op) after the
// store ran them: start is
// when they were sent (for latency), sent the same on the limiter's clock,
// seq the deny cache's before they were sent. It returns an error when ctx
// ended, or when the limiter's clock is one no store can decide at
// (ErrInvalidTime).
func (l *Limiter) finish(ctx context.Context, ops []driver.Op, out []Result, err error, start time.Time, sent int64, seq uint64) error {
	for i := range ops {
		op, res := &ops[i], &out[i]
		if op.Err == nil && err != nil {
			op.Err = err
		}
		if op.Err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("sluice: %s: %w", l.cfg.name, ctx.Err())
			}
			if errors.Is(op.Err, ErrInvalidTime) {
				// The limiter's clock is one no store decides at: not the
				// store's failure, so not the fail mode's to decide.
				return fmt.Errorf("%w (the clock of limiter %s)", op.Err, l.cfg.name)
			}
			*res = l.degrade(op)
			if l.cfg.observer != nil {
				l.observe(ctx, op, *res, AnswerFailMode, start, time.Since(start))
			}
			continue
		}
		*res = complete(op, l.rule)
		res.Warning = l.warns(*res)
		if res.Allowed && op.Cost > 0 && l.deny != nil {
			// A take changes what a cached refusal of a larger cost implies.
			l.deny.forgetStale(op.Key)
		}
		if !res.Allowed {
			l.cacheRefusal(op, res, sent, seq)
			if l.cfg.shadow {
				res.Allowed = true
				res.Shadowed = true
				res.RetryAfter = 0
			}
		}
		if l.cfg.observer != nil {
			l.observe(ctx, op, *res, AnswerStore, start, time.Since(start))
			l.observeExpired(op.Result.Expired)
		}
	}
	return nil
}

// logInterval is the least time between two logs of store errors by one
// limiter: a dead Valkey must not flood the logs at the request rate.
const logInterval = 10 * time.Second

func (l *Limiter) logStoreError(err error) {
	now := time.Now().UnixNano()
	last := l.lastLog.Load()
	if now-last < int64(logInterval) || !l.lastLog.CompareAndSwap(last, now) {
		return
	}
	l.cfg.logger.Warn("sluice: store unavailable, deciding by fail mode (logged at most every 10s)",
		"limiter", l.cfg.name, "fail_mode", l.cfg.failMode.String(), "err", err)
}

// complete is the Result of op, decided by the store, before the shadow
// mode: the store's Result with the limit that decided and its source
// (policy is the limiter's own rule; another rule is a plan's).
func complete(op *driver.Op, policy Rule) Result {
	s := &op.Result
	res := Result{Allowed: s.Allowed, Limit: op.Rule.Limit, Remaining: s.Remaining, RetryAfter: s.RetryAfter,
		ResetAfter: s.ResetAfter, OverrideInvalid: s.OverrideInvalid, Blocked: s.Blocked, BlockStarted: s.BlockStarted}
	switch {
	case s.Override:
		res.Source, res.Limit, res.OverrideParam = SourceOverride, s.OverrideLimit, s.OverrideParam
	case op.Rule != policy:
		res.Source = SourcePlan
	}
	return res
}

// degrade decides op by the fail mode.
func (l *Limiter) degrade(op *driver.Op) Result {
	l.logStoreError(op.Err)
	res := Result{Limit: op.Rule.Limit, Degraded: true}
	if l.cfg.failMode == FailOpen || l.cfg.shadow {
		res.Allowed = true
		res.Shadowed = l.cfg.failMode == FailClosed
	} else {
		res.RetryAfter = time.Second
	}
	return res
}

// Reset forgets all state of key, as if it had never been seen: the next
// request starts with the full limit ("unlock this user"), and a block
// of its penalty (WithPenalty) is lifted and its escalation forgotten. On a
// driver.DeleteNotifier store it is ResetNotify: the deny caches of every process
// hear of it. On any other store, only this limiter's cache does: another
// process's limiter that was asked for a deny cache (WithDenyCache(true))
// keeps refusing the key until its cached refusal's RetryAfter ends.
//
// With grants (WithGrants), Reset refills the key's grant state but for
// the units the holders hold (theirs until their grants end), and on a
// DeleteNotifier store deletes the key's plain state with a notice: every
// process's grants stop refusing the key locally, and ask the store at
// the next decision their units do not cover. Without such a store, another
// process refuses until the store's last answer said more could come.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	_, err := l.ResetNotify(ctx, key)
	return err
}

// ResetNotify is Reset, and reports how many subscriptions to the store's
// delete notices the reset reached (see driver.DeleteNotifier.DeleteNotify: on
// valkeystore, the processes watching the limiter's prefix, this one
// included when it has a deny cache or grants), or -1 when the store sends
// none.
func (l *Limiter) ResetNotify(ctx context.Context, key string) (int, error) {
	if err := l.ready(); err != nil {
		return 0, err
	}
	if key == "" {
		return 0, ErrInvalidKey
	}
	k := l.storeKey(key)
	if l.gr != nil {
		var buf [192]byte
		if err := l.gr.reset(ctx, driver.AppendGrantKey(buf[:0], l.cfg.prefix, l.cfg.name, l.rule, key), k); err != nil {
			return -1, fmt.Errorf("%w: reset %s: %w", ErrStoreUnavailable, l.cfg.name, err)
		}
		if l.notify == nil {
			return -1, nil
		}
		// The notice of the key (its plain state, deleted: a process
		// deciding it without grants is reset too) ends every process's
		// local refusal of it: see resetWatcher.
		tctx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
		defer cancel()
		n, err := l.notify.DeleteNotify(tctx, l.cfg.prefix, k)
		if err != nil {
			return n, fmt.Errorf("%w: reset %s: the grant state was reset, but the notice to the other processes failed (they may refuse the key locally until the store could have had more): %w", ErrStoreUnavailable, l.cfg.name, err)
		}
		return n, nil
	}
	if l.deny != nil {
		l.deny.Deleted(k)
	}
	keys := []string{k}
	if pk := l.penaltyKey(key); pk != "" {
		keys = append(keys, pk) // a block lifted, its escalation forgotten
	}
	tctx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
	defer cancel()
	n := -1
	var err error
	if l.notify != nil {
		n, err = l.notify.DeleteNotify(tctx, l.cfg.prefix, keys...)
	} else {
		err = l.store.Delete(tctx, keys...)
	}
	if l.deny != nil {
		// A refusal of a request sent before the delete, cached since,
		// may be stale; one sent after it is not cached (seq).
		l.deny.Deleted(k)
	}
	if err != nil {
		return n, fmt.Errorf("%w: reset %s: %w", ErrStoreUnavailable, l.cfg.name, err)
	}
	return n, nil
}

// Wait blocks until one event is allowed for key and takes it, or until ctx
// ends. It returns early with an error when ctx's deadline comes before the
// advertised RetryAfter, since waiting could not succeed.
func (l *Limiter) Wait(ctx context.Context, key string) error {
	return l.WaitN(ctx, key, 1)
}

// WaitN is Wait for an event of cost n.
func (l *Limiter) WaitN(ctx context.Context, key string, n int64) error {
	for {
		res, err := l.AllowN(ctx, key, n)
		if err != nil {
			return err
		}
		if res.Allowed {
			return nil
		}
		delay := res.RetryAfter
		if delay <= 0 {
			delay = time.Millisecond
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < delay {
			return fmt.Errorf("sluice: %s: wait of %v would exceed the context deadline: %w", l.cfg.name, delay, context.DeadlineExceeded)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("sluice: %s: %w", l.cfg.name, ctx.Err())
		case <-t.C:
		}
	}
}
