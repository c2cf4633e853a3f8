package sluice

import (
	"context"
	"crypto/rand"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// Grants (WithGrants): a limiter obtains from its store, in one call, a
// grant of part of a key's limit, decides locally against it, and calls
// the store again only to renew, extend or give back its grant. Grants
// are leases: they end on their own after a short life by the store's
// clock, so a crashed process strands its units only that long.
//
// The guarantee is exact: over every interval, the processes together
// admit at most what the policy admits on one key without grants. The
// store keeps the key's level L0, and per holder h (a limiter instance)
// the units G_h granted to h not known to be spent, with the invariant
// L0 + ΣG_h ≤ burst and the level's refill capped at burst − ΣG_h; a
// holder reports its unspent units R with every call (G_h = min(R, G_h)),
// keeps one call in flight per key, and voids its units at the call's
// send time plus the grant's time left, on its own clock, before the
// store reaps them. So T = L0 + Σ(unspent) never exceeds the burst, grows
// only by refill at the rate, and falls by every admission's cost: over
// [s, t] admissions ≤ burst + rate·(t − s), the exact bucket's envelope
// (docs/grants.md has the proof, the fixed window's, and the bound on
// under-admission).

// GrantOptions configures a limiter's grants (WithGrants). The zero value
// is the default: grants of 2 seconds, demand measured over half a
// second, 10,000 keys.
type GrantOptions struct {
	// Life is how long a grant lasts unless renewed, by the store's
	// clock: a whole number of milliseconds from 10ms to an hour (default
	// 2s). A process that dies strands its units for at most this long.
	Life time.Duration
	// Period is the time over which a key's demand is measured to size
	// its grants, and after which a key without decisions gives its units
	// back (default Life / 4; at most Life / 2).
	Period time.Duration
	// MaxKeys bounds the keys whose grants the limiter holds at once
	// (default 10,000): a key beyond it evicts another, whose units are
	// given back.
	MaxKeys int
}

// WithGrants makes the limiter decide against grants of each key's limit
// held in the process (see GrantOptions and docs/grants.md). Every process
// of a policy must agree on it: grants live under keys apart from the
// plain algorithm's state, so a process without grants would enforce the
// limit again on its own (a grant call that finds the plain state counts
// it in GrantStats.Mixed and logs it).
//
// New refuses it, with the reason, for SlidingWindow, SlidingLog and
// InFlight (which grants cannot keep exact), CountRejected, a store that
// is not a driver.Granter, and with reservations, plans, overrides,
// WithWarning, WithDenyCache(true) or WithPenalty, which it cannot honour.
func WithGrants(o GrantOptions) Option {
	return optionFunc(func(c *config) { c.grantOn, c.grant = true, o })
}

// FailShare, as a fail mode for a limiter WithGrants, decides while the
// store is unreachable against a local bucket of the process's share of
// the limit: its last share, decaying over a grant's life toward
// 1 / holders seen. It is not exact: processes that cannot reach the store
// do not hear of each other (see docs/grants.md). New refuses it without
// grants.
const FailShare FailMode = 2

// GrantStats counts what a limiter's grants did since New.
type GrantStats struct {
	// Calls is the grant calls made to the store (every kind below).
	Calls int64
	// Taken is the calls that obtained units for a key that held none;
	// Renewed those made while holding some (renewals and extensions).
	Taken, Renewed int64
	// Granted is the units obtained; Returned the units given back (a key
	// gone quiet, evicted, or Close); Expired those whose grant ended
	// unspent.
	Granted, Returned, Expired int64
	// Local is the decisions made against a grant without a call; Store
	// those that waited for a call (Failed: the call failed and the fail
	// mode decided).
	Local, Store, Failed int64
	// Mixed is the calls that found the key's plain state: some process
	// decides the key without grants.
	Mixed int64
	// Keys is the keys holding grant state in the limiter now.
	Keys int64
}

// Add returns the sum of s and o, field by field: the counters of limiters
// of one name, or of a limiter and those it replaced.
func (s GrantStats) Add(o GrantStats) GrantStats {
	return GrantStats{Calls: s.Calls + o.Calls, Taken: s.Taken + o.Taken, Renewed: s.Renewed + o.Renewed,
		Granted: s.Granted + o.Granted, Returned: s.Returned + o.Returned, Expired: s.Expired + o.Expired,
		Local: s.Local + o.Local, Store: s.Store + o.Store, Failed: s.Failed + o.Failed, Mixed: s.Mixed + o.Mixed,
		Keys: s.Keys + o.Keys}
}

// GrantStats returns the limiter's grant counters (zero without grants).
func (l *Limiter) GrantStats() GrantStats {
	if l.ready() != nil || l.gr == nil {
		return GrantStats{}
	}
	return l.gr.statsNow()
}

// Close stops the limiter's grants: it gives back every unspent unit
// (waiting up to the limiter's timeout) and stops their background work.
// The limiter still decides after Close, one store call per decision,
// holding nothing between them. Close is a no-op without grants.
func (l *Limiter) Close() error {
	if l.ready() != nil || l.gr == nil {
		return nil
	}
	return l.gr.close()
}

// Defaults of GrantOptions.
const (
	defaultGrantLife = 2 * time.Second
	defaultGrantKeys = 10000
	grantShards      = 16
)

// grants is a limiter's grant state: the keys it holds grants of.
type grants struct {
	store   driver.Granter
	rule    Rule
	prefix  string
	name    string
	holder  driver.HolderID
	life    time.Duration
	period  int64 // ns
	perKeys int   // keys per shard
	timeout time.Duration
	clock   func() time.Time // WithClock, or nil
	mono    func() int64
	share   bool // FailShare
	spawn   func(func())
	onMixed func()
	shards  [grantShards]grantShard
	closed  atomic.Bool
	stop    chan struct{}
	once    sync.Once
	st      grantCounters
}

type grantShard struct {
	mu sync.Mutex
	m  map[string]*gkey
}

type grantCounters struct {
	calls, taken, renewed, granted, returned, expired, local, store, failed, mixed atomic.Int64
}

// grantHooks, set by tests, replace how a limiter's grants run their
// background calls and whether they start their sweeper.
var grantHooks struct {
	spawn     func(func())
	drain     func() // runs the calls spawn holds, before anything waits for one (waitCall)
	noSweeper bool
}

// setGrants resolves WithGrants, refusing what grants cannot honour.
func (l *Limiter) setGrants() error {
	cfg := &l.cfg
	if !cfg.grantOn {
		if cfg.failMode == FailShare {
			return invalidField("WithFailMode", "FailShare is the fail mode of a limiter WithGrants: without grants there is no share")
		}
		return nil
	}
	if err := l.grantConflicts(); err != nil {
		return err
	}
	st, ok := l.store.(driver.Granter)
	if !ok {
		return invalidField("WithGrants", "WithGrants: store %T keeps no grants (it does not implement driver.Granter)", l.store)
	}
	o, err := resolveGrants(cfg.grant)
	if err != nil {
		return err
	}
	g := &grants{store: st, rule: l.rule, prefix: cfg.prefix, name: cfg.name, life: o.Life, period: int64(o.Period),
		perKeys: max(1, o.MaxKeys/grantShards), timeout: cfg.timeout, clock: cfg.clock, mono: l.mono,
		share: cfg.failMode == FailShare, spawn: func(f func()) { go f() }, stop: make(chan struct{})}
	if _, err := rand.Read(g.holder[:]); err != nil {
		return fmt.Errorf("sluice: grants: holder id: %w", err)
	}
	for i := range g.shards {
		g.shards[i].m = map[string]*gkey{}
	}
	logger, name := cfg.logger, cfg.name
	var lastMixed atomic.Int64
	g.onMixed = func() {
		now := time.Now().UnixNano()
		if last := lastMixed.Load(); now-last >= int64(logInterval) && lastMixed.CompareAndSwap(last, now) {
			logger.Warn("sluice: a grant call found the key's plain state: some process decides this policy without grants, so the limit is enforced twice (logged at most every 10s)", "limiter", name)
		}
	}
	if grantHooks.spawn != nil {
		g.spawn = grantHooks.spawn
	}
	if !grantHooks.noSweeper {
		go g.sweeper()
		// The sweeper holds the grants, never the Limiter: once the
		// Limiter is unreachable, its cleanup stops the sweeper.
		runtime.AddCleanup(l, func(g *grants) { g.stopSweeper() }, g)
	}
	if n, ok := l.store.(driver.DeleteNotifier); ok {
		// A Reset in any process tells every process's grants, so that
		// none keeps refusing the key locally after it (resetWatcher).
		// The store holds the watcher, never the Limiter.
		stop := n.WatchDeletes(cfg.prefix, resetWatcher{g})
		runtime.AddCleanup(l, func(stop func()) { stop() }, stop)
	}
	l.gr = g
	return nil
}

// resetWatcher hears of the resets of a limiter's keys made by any
// process (Limiter.Reset with grants sends a notice of the key's plain
// state, which it deletes). A key reset is no longer refused locally: its
// next decision its units do not cover asks the store again. When notices
// may have been missed (Watching), every key's local refusal ends.
type resetWatcher struct{ g *grants }

func (w resetWatcher) Deleted(key string) {
	w.g.heardReset(func(gk *gkey) bool { return gk.plain == key })
}

func (w resetWatcher) Watching(live bool) {
	if live {
		w.g.heardReset(func(*gkey) bool { return true })
	}
}

// heardReset ends the local refusal of the keys match picks.
func (g *grants) heardReset(match func(*gkey) bool) {
	var keys []*gkey
	for i := range g.shards {
		sh := &g.shards[i]
		sh.mu.Lock()
		for _, gk := range sh.m {
			if match(gk) {
				keys = append(keys, gk)
			}
		}
		sh.mu.Unlock()
	}
	for _, gk := range keys {
		gk.mu.Lock()
		gk.refused = 0
		gk.resets++
		gk.mu.Unlock()
	}
}

// resolveGrants fills in o's defaults and checks it.
func resolveGrants(o GrantOptions) (GrantOptions, error) {
	if o.Life == 0 {
		o.Life = defaultGrantLife
	}
	if o.Life < 10*time.Millisecond || o.Life > driver.MaxGrantLife || o.Life%time.Millisecond != 0 {
		return o, invalidField("GrantOptions.Life", "Life must be a whole number of milliseconds from 10ms to %v, got %v", driver.MaxGrantLife, o.Life)
	}
	if o.Period == 0 {
		o.Period = o.Life / 4
	}
	if o.Period < time.Millisecond || o.Period > o.Life/2 {
		return o, invalidField("GrantOptions.Period", "Period must be from 1ms to Life / 2 (%v), got %v", o.Life/2, o.Period)
	}
	if o.MaxKeys == 0 {
		o.MaxKeys = defaultGrantKeys
	}
	if o.MaxKeys < 1 || o.MaxKeys > 10_000_000 {
		return o, invalidField("GrantOptions.MaxKeys", "MaxKeys must be from 1 to 10,000,000, got %d", o.MaxKeys)
	}
	return o, nil
}

// grantConflicts refuses what a limiter with grants cannot honour.
func (l *Limiter) grantConflicts() error {
	cfg := &l.cfg
	why := ""
	switch {
	case driver.Grantable(l.rule) != nil:
		return invalidField("WithGrants", "WithGrants: %s", Reason(driver.Grantable(l.rule)))
	case cfg.rsvOn:
		why = "reservations settle on the store's plain state, which a limiter with grants does not decide on"
	case len(l.plans) > 0:
		why = "a grant is a share of one limit, and a plan changes the limit per decision under the grants outstanding"
	case cfg.ovOn:
		why = "an override set by another process changes the limit under the grants outstanding"
	case cfg.deny == 1:
		why = "a limiter with grants refuses locally already (WithDenyCache(true) would never be used)"
	case cfg.warnSet && cfg.warn > 0:
		why = "a process knows only its own units, not how close the key is to its first refusal (WithWarning)"
	case cfg.penaltySet:
		why = "a penalty counts a key's refusals on the store, in the decision's script call, and a grant's refusals are local (WithPenalty)"
	}
	if why != "" {
		return invalidField("WithGrants", "WithGrants: %s", why)
	}
	return nil
}

// statsNow returns the counters.
func (g *grants) statsNow() GrantStats {
	s := &g.st
	out := GrantStats{Calls: s.calls.Load(), Taken: s.taken.Load(), Renewed: s.renewed.Load(), Granted: s.granted.Load(),
		Returned: s.returned.Load(), Expired: s.expired.Load(), Local: s.local.Load(), Store: s.store.Load(),
		Failed: s.failed.Load(), Mixed: s.mixed.Load()}
	for i := range g.shards {
		sh := &g.shards[i]
		sh.mu.Lock()
		out.Keys += int64(len(sh.m))
		sh.mu.Unlock()
	}
	return out
}

// shardOf returns the shard of a grant key.
func (g *grants) shardOf(k string) *grantShard {
	var h uint32 = 2166136261
	for i := 0; i < len(k); i++ {
		h = (h ^ uint32(k[i])) * 16777619
	}
	return &g.shards[h%grantShards]
}

// get returns the state of the grant key k (the plain key plain), made
// when missing; a full shard first evicts another key, giving its units
// back.
func (g *grants) get(k []byte, plain func() string) *gkey {
	sh := g.shardOf(string(k))
	sh.mu.Lock()
	gk := sh.m[string(k)]
	if gk != nil {
		sh.mu.Unlock()
		return gk
	}
	var evicted *gkey
	if len(sh.m) >= g.perKeys {
		for key, e := range sh.m {
			evicted = e
			delete(sh.m, key)
			break
		}
	}
	gk = &gkey{key: string(k), plain: plain()}
	sh.m[gk.key] = gk
	sh.mu.Unlock()
	if evicted != nil {
		g.giveBack(evicted)
	}
	return gk
}

// giveBack returns gk's unspent units in the background, if it has any
// and no call in flight (a key with one strands its units until its grant
// ends: under-admission only).
func (g *grants) giveBack(gk *gkey) {
	gk.mu.Lock()
	defer gk.mu.Unlock()
	now := g.mono()
	gk.expire(g, now)
	if gk.calling || gk.unspent == 0 {
		return
	}
	c := gk.begin(g, now, 0, 0, true)
	g.spawn(func() { g.run(gk, c) })
}

// sweeper gives back the units of quiet keys, extends the grants of busy
// ones, and forgets keys that hold nothing, every period.
func (g *grants) sweeper() {
	t := time.NewTicker(time.Duration(g.period))
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
			g.sweep()
		}
	}
}

func (g *grants) stopSweeper() { g.once.Do(func() { close(g.stop) }) }

// sweep is one round of the sweeper.
func (g *grants) sweep() {
	for i := range g.shards {
		sh := &g.shards[i]
		sh.mu.Lock()
		keys := make([]*gkey, 0, len(sh.m))
		for _, gk := range sh.m {
			keys = append(keys, gk)
		}
		sh.mu.Unlock()
		for _, gk := range keys {
			if g.sweepKey(gk) {
				sh.mu.Lock()
				if sh.m[gk.key] == gk {
					delete(sh.m, gk.key)
				}
				sh.mu.Unlock()
			}
		}
	}
}

// sweepKey gives back a quiet key's units or renews a busy one's, and
// reports whether the key holds nothing and may be forgotten.
func (g *grants) sweepKey(gk *gkey) bool {
	gk.mu.Lock()
	defer gk.mu.Unlock()
	now := g.mono()
	gk.expire(g, now)
	if gk.calling {
		return false
	}
	quiet := now-gk.used >= g.period
	switch {
	case quiet && gk.unspent > 0:
		c := gk.begin(g, now, 0, 0, true)
		g.spawn(func() { g.run(gk, c) })
		return false
	case quiet:
		return now >= gk.refused && now-gk.used >= 2*g.period
	}
	if c, ok := gk.renewDue(g, now); ok {
		g.spawn(func() { g.run(gk, c) })
	}
	return false
}

// close gives back every unit and stops the sweeper, after any call in
// flight, within the limiter's timeout.
func (g *grants) close() error {
	g.closed.Store(true)
	g.stopSweeper()
	deadline := time.Now().Add(g.timeout)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var all []*gkey
	for i := range g.shards {
		sh := &g.shards[i]
		sh.mu.Lock()
		for _, gk := range sh.m {
			all = append(all, gk)
		}
		sh.mu.Unlock()
	}
	var batch []driver.GrantOp
	var keys []*gkey
	var calls []grantCall
	for _, gk := range all {
		if c, ok := gk.closing(g, ctx, deadline); ok {
			batch, keys, calls = append(batch, c.op), append(keys, gk), append(calls, c)
		}
	}
	if len(batch) == 0 {
		return nil
	}
	err := g.store.Grant(ctx, batch)
	for i, gk := range keys {
		e := err
		if e == nil {
			e = batch[i].Err
		}
		gk.mu.Lock()
		gk.apply(g, calls[i], batch[i].Result, e)
		gk.mu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("%w: grants of %s: %w", ErrStoreUnavailable, g.name, err)
	}
	return nil
}

// closing waits for gk's call in flight, if any, and starts the give-back
// of its units, if it holds some or the store knows it: a give-back of
// nothing still tells the store the process left, so that its record
// (units spent but not yet reported, which cap the level's refill) and its
// place among the holders (which lowers the others' fair cap) go at once,
// not when its grant ends.
func (gk *gkey) closing(g *grants, ctx context.Context, deadline time.Time) (grantCall, bool) {
	gk.mu.Lock()
	defer gk.mu.Unlock()
	for gk.calling {
		ch := gk.done
		gk.mu.Unlock()
		err := waitCall(ctx, ch, deadline)
		gk.mu.Lock()
		if err != nil {
			return grantCall{}, false
		}
	}
	now := g.mono()
	gk.expire(g, now)
	if gk.unspent == 0 && !gk.known {
		return grantCall{}, false
	}
	return gk.begin(g, now, 0, 0, true), true
}

// gkey is one key's grant state in the process.
type gkey struct {
	mu      sync.Mutex
	key     string // the grant state's store key
	plain   string // the plain state's
	unspent int64  // units held
	until   int64  // mono: the units are void from then on
	refused int64  // mono: the store had nothing: refuse locally until then
	resets  uint64 // the resets heard of (a reset's notice, in any process)
	calling bool   // a call is in flight (one at most: see grants)
	known   bool   // the store may keep a record of the process for the key
	done    chan struct{}
	used    int64   // mono of the last decision
	start   int64   // mono: start of the demand period
	demand  int64   // units asked in the period
	rate    float64 // EWMA of the demand per period
	holders int64   // holders seen at the last call
	// FailShare: the share of the limit at the last call and its local bucket.
	share, tokens  float64
	shareAt, tokAt int64
}

// A grantCall is one call of a key in flight.
type grantCall struct {
	op   driver.GrantOp
	sent int64 // mono
	had  int64 // unspent when sent
	ret  bool
	// resets is gk.resets when sent: an answer from before a reset
	// heard of since sets no local refusal.
	resets uint64
}

// expire voids gk's units once their grant has ended.
func (gk *gkey) expire(g *grants, now int64) {
	if gk.unspent > 0 && now >= gk.until {
		g.st.expired.Add(gk.unspent)
		gk.unspent = 0
	}
}

// want is the units gk asks for: its demand over a period (the larger of
// the EWMA and the period so far), at least 1; after Close, none ahead.
func (gk *gkey) want(g *grants) int64 {
	if g.closed.Load() {
		return 0
	}
	w := math.Ceil(max(gk.rate, float64(gk.demand)))
	return int64(min(max(w, 1), float64(g.rule.Limit)))
}

// count adds a decision's cost to the demand, rolling the period.
func (gk *gkey) count(g *grants, now, cost int64) {
	if gk.start == 0 {
		gk.start = now
	}
	if k := (now - gk.start) / g.period; k > 0 {
		gk.rate = 0.5*gk.rate + 0.5*float64(gk.demand)
		if k > 1 {
			gk.rate *= math.Pow(0.5, float64(min(k-1, 64)))
		}
		gk.demand, gk.start = 0, now
	}
	gk.demand += max(cost, 1)
	gk.used = now
}

// renewDue returns the call to make in the background after a local
// decision, if one is due: the units fell under half a period's demand,
// or the grant ends within a quarter of its life.
func (gk *gkey) renewDue(g *grants, now int64) (grantCall, bool) {
	if gk.calling || g.closed.Load() || now < gk.refused {
		return grantCall{}, false
	}
	want := gk.want(g)
	if gk.unspent < max(1, want/2) || gk.unspent > 0 && gk.until-now < int64(g.life)/4 {
		return gk.begin(g, now, want, 0, false), true
	}
	return grantCall{}, false
}

// begin starts a call of gk (its lock held): the report of its unspent
// units, the units wanted and needed, or a give-back of them all.
func (gk *gkey) begin(g *grants, now, want, need int64, ret bool) grantCall {
	gk.calling = true
	gk.done = make(chan struct{})
	c := grantCall{sent: now, had: gk.unspent, ret: ret, resets: gk.resets}
	c.op = driver.GrantOp{Key: gk.key, Plain: gk.plain, Rule: g.rule, Holder: g.holder, Unspent: gk.unspent,
		Want: max(want, need), Need: need, Return: ret, Life: g.life, Deadline: time.Now().Add(g.timeout)}
	if g.clock != nil {
		c.op.Now = g.clock()
	}
	if ret {
		gk.unspent = 0 // given back from now on
	}
	g.st.calls.Add(1)
	switch {
	case ret:
		g.st.returned.Add(c.had)
	case c.had > 0:
		g.st.renewed.Add(1)
	default:
		g.st.taken.Add(1)
	}
	return c
}

// run makes call c of gk and applies its answer.
func (g *grants) run(gk *gkey, c grantCall) error {
	ctx, cancel := context.WithDeadline(context.Background(), c.op.Deadline)
	defer cancel()
	batch := []driver.GrantOp{c.op}
	err := g.store.Grant(ctx, batch)
	if err == nil {
		err = batch[0].Err
	}
	gk.mu.Lock()
	gk.apply(g, c, batch[0].Result, err)
	gk.mu.Unlock()
	return err
}

// apply takes the answer to call c (gk's lock held): the units the store
// counts for the holder (never more than it kept), valid until the call's
// send time plus their time left less a thousandth of it (clock rates),
// and when the store had too little, a local refusal until more can come.
func (gk *gkey) apply(g *grants, c grantCall, res driver.GrantResult, err error) {
	gk.calling = false
	close(gk.done)
	if !c.ret {
		gk.known = true // a call that failed may have run
	}
	if err != nil {
		return
	}
	if c.ret {
		gk.known = false // the store deleted the record
	}
	if res.Mixed {
		g.st.mixed.Add(1)
		g.onMixed()
	}
	g.st.granted.Add(res.Granted)
	now := g.mono()
	gk.unspent = min(gk.unspent, res.Held-res.Granted) + res.Granted
	left := int64(res.Left)
	gk.until = c.sent + left - left/1000
	if left == 0 {
		gk.unspent = 0
	}
	gk.holders = res.Holders
	if res.More > 0 && c.resets == gk.resets {
		// Neither renew nor decide beyond the units until more can come
		// (unless the key was reset since the call was sent).
		gk.refused = now + int64(res.More)
	}
	gk.setShare(g, res, now)
}
