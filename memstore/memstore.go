// Package memstore is an in-process driver.Store with the same semantics as
// package valkeystore: the same algorithms, the same arithmetic and the same
// key expiry, so a program can develop against it and move to Valkey
// unchanged.
//
// Its state lives in one process: with several processes (or several
// replicas of a service) each enforces the limit on its own, multiplying it.
// Use it for single-process programs, development and tests.
package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/luascript"
)

const shardCount = 64

// sweepEvery is the number of writes to a shard between two sweeps of its
// expired keys.
const sweepEvery = 1024

// Store is an in-process driver.Store. The zero value is not usable; call
// New. It is safe for concurrent use.
type Store struct {
	clock  func() time.Time
	seed   maphash.Seed
	shards [shardCount]shard
	ovs    overrides
	rsv    records     // reservations; see settle.go
	grants grantStates // see grant.go
	watch  watchers
}

type shard struct {
	mu     sync.Mutex
	m      map[string]*item
	pen    map[string]penState // penalty keys: see penalty.go
	writes int
}

type item struct {
	state   state
	expires time.Time
}

// An Option configures a Store.
type Option interface{ apply(*Store) }

// optionFunc is an Option made of a function, as the root package's.
type optionFunc func(*Store)

func (f optionFunc) apply(x *Store) { f(x) }

// WithClock sets the store's clock (default time.Now). It is the time of
// Ops that carry none, and the clock keys expire by, as Valkey's own clock
// is for valkeystore.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(s *Store) { s.clock = now })
}

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{clock: time.Now, seed: maphash.MakeSeed()}
	for _, o := range opts {
		o.apply(s)
	}
	for i := range s.shards {
		s.shards[i].m = make(map[string]*item)
		s.shards[i].pen = make(map[string]penState)
	}
	s.ovs.init()
	return s
}

// shard returns the shard of key: of its hash tag, so that the keys of one
// identity (its counters, override and penalty keys) share a lock, as
// they share a slot on a Valkey Cluster.
func (s *Store) shard(key string) *shard {
	return &s.shards[maphash.String(s.seed, hashTag(key))%shardCount]
}

// Do implements driver.Store. Each Op is decided under its shard's lock.
func (s *Store) Do(ctx context.Context, batch []driver.Op) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for i := range batch {
		op := &batch[i]
		op.Result, op.Err = s.decide(op)
	}
	return nil
}

// decide decides op under its shard's lock: it reads the key's state,
// applies the key's override, runs the algorithm, and keeps or deletes
// the state as the algorithm says.
func (s *Store) decide(op *driver.Op) (driver.Result, error) {
	if err := s.checkOp(op); err != nil {
		return driver.Result{}, err
	}
	sh := s.shard(op.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	// The clock is read under the lock, as Valkey's TIME is inside the
	// script: decisions on one key see time move forward.
	clockNow := s.clock()
	now := opNow(op, clockNow)
	us := now.UnixMicro()

	var st state
	it, err := sh.load(op.Key, op.Rule.Algorithm, clockNow, &st)
	if err != nil {
		return driver.Result{}, err
	}
	r, over, ovInvalid, until := s.applyOverride(op, now, clockNow)
	cost, receipt := op.Cost, op.Receipt
	overLimit := over && cost > r.Limit
	if overLimit {
		// More than the override allows: refused, taking nothing, until
		// the override lapses (the plan's limit admits the cost).
		cost, receipt = 0, 0
	}
	if op.PenaltyKey != "" && op.Cost >= 0 {
		if u := sh.penaltyUntil(op.PenaltyKey, us, clockNow); u > 0 {
			// Blocked: refused, the algorithm neither read nor written.
			op.Receipt = us
			res := (&reply{retry: u - us, reset: u - us}).result(over, ovInvalid, &r)
			res.Blocked = true
			return res, nil
		}
	}
	var rep reply
	var write, del bool
	if r.Algorithm == driver.AlgorithmInFlight {
		rep, write, del = inFlight(&st, us, r.Limit, r.Param(), op.Cost, op.Renew, op.Lease)
	} else if rep, write, del, err = runAlgorithm(&st, it != nil, us, now, &r, cost, receipt); err != nil {
		return driver.Result{}, err
	}
	if overLimit {
		rep.allowed, rep.retry = false, until.UnixMicro()-us
	}
	sh.settle(op.Key, it, &st, write, del, clockNow)
	op.Receipt = rep.receiptOr(us)
	started := false
	if op.PenaltyKey != "" && !rep.allowed && op.Cost > 0 {
		if d := sh.penaltyRefused(op.PenaltyKey, us, &op.Penalty, clockNow); d > 0 {
			rep.remaining, rep.retry, rep.reset, started = 0, d, d, true
		}
	}
	res := rep.result(over, ovInvalid, &r)
	res.Blocked, res.BlockStarted = started, started
	return res, nil
}

// opNow is the time op is decided at: its own, or the store's clock.
func opNow(op *driver.Op, clockNow time.Time) time.Time {
	if op.Now.IsZero() {
		return clockNow
	}
	return op.Now
}

// settle deletes key or keeps st under it, as the algorithm said. The
// caller holds sh.mu.
func (sh *shard) settle(key string, it *item, st *state, write, del bool, clockNow time.Time) {
	switch {
	case del:
		delete(sh.m, key)
	case write:
		sh.keep(key, it, st, clockNow)
	}
}

// receiptOr is the receipt the reply names, or us (the time of the
// decision) when it names none.
func (rep *reply) receiptOr(us int64) int64 {
	if rep.receipt != 0 {
		return rep.receipt
	}
	return us
}

// result is the Result of rep, decided by rule r, overridden when over.
func (rep *reply) result(over, ovInvalid bool, r *driver.Rule) driver.Result {
	res := driver.Result{
		Allowed:         rep.allowed,
		Remaining:       rep.remaining,
		RetryAfter:      time.Duration(rep.retry) * time.Microsecond,
		ResetAfter:      time.Duration(rep.reset) * time.Microsecond,
		Override:        over,
		OverrideInvalid: ovInvalid,
		Expired:         rep.expired,
	}
	if over {
		res.OverrideLimit, res.OverrideParam = r.Limit, r.Param() // 0 for calendar periods
	}
	return res
}

// load returns the live item of key (nil when there is none: an expired
// one is deleted) and sets st to the state an algorithm starts from,
// refusing state of another algorithm. The caller holds sh.mu.
func (sh *shard) load(key string, alg driver.Algorithm, clockNow time.Time, st *state) (*item, error) {
	it, ok := sh.m[key]
	if ok && !clockNow.Before(it.expires) {
		delete(sh.m, key)
		it, ok = nil, false
	}
	if ok {
		if it.state.alg != alg {
			return nil, fmt.Errorf("memstore: key %q holds %v state, not %v: give limiters with different policies different names", key, it.state.alg, alg)
		}
		// st shares it.state's log; slidingLog only changes the log on paths
		// where it also writes or deletes the key.
		*st = it.state
	}
	st.alg = alg
	return it, nil
}

// runAlgorithm runs r's algorithm on st (exists: the key had state) at us
// (now, for calendar periods), and returns its reply and whether to write
// or delete the key.
func runAlgorithm(st *state, exists bool, us int64, now time.Time, r *sluice.Rule, cost, receipt int64) (rep reply, write, del bool, err error) {
	switch r.Algorithm {
	case driver.AlgorithmFixedWindow:
		if !r.Calendar.IsZero() {
			return calendarRun(st, exists, us, now, r, cost, receipt)
		}
		rep, write, del = fixedWindow(st, exists, us, r.Limit, r.Param(), cost, r.CountRejected, receipt)
	case driver.AlgorithmSlidingLog:
		rep, write, del = slidingLog(st, exists, us, r.Limit, r.Param(), cost, r.CountRejected, receipt)
	case driver.AlgorithmSlidingWindow:
		rep, write, del = slidingWindow(st, exists, us, r.Limit, r.Param(), cost, receipt)
	case driver.AlgorithmTokenBucket:
		rep, write, del = tokenBucket(st, exists, us, r.Limit, r.Param(), cost, receipt)
	case driver.AlgorithmGCRA:
		rep, write, del = gcra(st, exists, us, r.Limit, r.Param(), cost, receipt)
	}
	return rep, write, del, nil
}

// calendarRun runs a fixed window over r's calendar periods; now outside
// the periods around it is clock skew.
func calendarRun(st *state, exists bool, us int64, now time.Time, r *sluice.Rule, cost, receipt int64) (reply, bool, bool, error) {
	rep, write, del, in := calendarWindow(st, exists, us, luascript.CalendarBounds(r, now), r.Limit, cost, r.CountRejected, receipt)
	if !in {
		return rep, false, false, fmt.Errorf("memstore: %w", driver.ErrClockSkew)
	}
	return rep, write, del, nil
}

// keep stores st under key (it: the key's item, nil when new), expiring
// as valkeystore does: PEXPIRE in whole milliseconds, rounded up, plus
// the margin. Every sweepEvery writes it sweeps the shard. The caller
// holds sh.mu.
func (sh *shard) keep(key string, it *item, st *state, clockNow time.Time) {
	ttl := time.Duration((st.ttlMicro+999)/1000)*time.Millisecond + driver.KeyTTLMargin
	if it == nil {
		it = &item{}
		sh.m[key] = it
	}
	it.state, it.expires = *st, clockNow.Add(ttl)
	sh.writes++
	if sh.writes%sweepEvery == 0 {
		sh.sweep(clockNow)
	}
}

func (sh *shard) sweep(now time.Time) {
	for k, it := range sh.m {
		if !now.Before(it.expires) {
			delete(sh.m, k)
		}
	}
	for k, st := range sh.pen {
		if !now.Before(st.expires) {
			delete(sh.pen, k)
		}
	}
}

// Delete implements driver.Store.
func (s *Store) Delete(ctx context.Context, keys ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, k := range keys {
		sh := s.shard(k)
		sh.mu.Lock()
		delete(sh.m, k)
		delete(sh.pen, k)
		sh.mu.Unlock()
	}
	return nil
}

// TTLs returns every live key that starts with prefix, with the time it has
// left to live. It is for tests and inspection.
func (s *Store) TTLs(prefix string) map[string]time.Duration {
	now := s.clock()
	out := make(map[string]time.Duration)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, it := range sh.m {
			if now.Before(it.expires) && strings.HasPrefix(k, prefix) {
				out[k] = it.expires.Sub(now)
			}
		}
		for k, st := range sh.pen {
			if now.Before(st.expires) && strings.HasPrefix(k, prefix) {
				out[k] = st.expires.Sub(now)
			}
		}
		sh.mu.Unlock()
	}
	return out
}
