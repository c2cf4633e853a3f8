package sluice

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// InFlight limits how many things happen at once per key, rather than how
// often: at most Limit leases per key exist at once, across every process
// sharing the store. A lease ends when it is released, or Lease after it
// was acquired or last renewed, by the store's clock (Valkey's TIME, never
// the client's, unless WithClock says otherwise): the slot of a holder that
// crashed, lost its connection or forgot to release comes back on its own.
//
// Use Limiter.Acquire to take a lease, Lease.Renew to keep one past Lease,
// and Lease.Release to end it. Allow, AllowN and Wait refuse an InFlight
// limiter (ErrWrongKind): a unit taken without a lease could never be
// released. Peek reports whether a lease would be given now, taking none.
// AllowAll takes a lease for a Check of cost 1 on an InFlight limiter,
// together with the other checks' units: a refusal by any check takes
// nothing from the others (Decision.Leases holds the leases taken).
type InFlight struct {
	Limit int64
	Lease time.Duration
}

// Rule implements Policy.
func (p InFlight) Rule() (Rule, error) {
	r := Rule{Algorithm: driver.AlgorithmInFlight, Limit: p.Limit, Window: p.Lease}
	if err := r.Validate(); err != nil {
		return Rule{}, within("InFlight", "InFlight", err)
	}
	return r, nil
}

var (
	// ErrLeaseLost is the error of Renew for a lease that had already ended
	// (released, expired, or reset): its slot may be another holder's now,
	// and the work it guarded is no longer counted.
	ErrLeaseLost = errors.New("sluice: lease lost")

	// ErrInvalidLease is the error for a lease id that is not one Acquire
	// gives (see Limiter.Lease), and for an Op whose lease fields do not
	// fit its algorithm. It is driver.ErrInvalidLease.
	ErrInvalidLease = driver.ErrInvalidLease

	// ErrWrongKind is the error of a rate decision (Allow, AllowN, Wait,
	// AllowEach) on an InFlight limiter, and of Acquire on a rate limiter.
	ErrWrongKind = errors.New("sluice: wrong kind of limit")
)

// newLeaseID returns a random LeaseID.
func newLeaseID() driver.LeaseID {
	var id driver.LeaseID
	for id.IsZero() {
		rand.Read(id[:]) // never fails (crypto/rand panics first)
	}
	return id
}

// The first character of a lease's opaque id (Lease.ID): a lease the store
// holds, or one the fail mode gave without the store.
const (
	heldMark = 'h'
	openMark = 'o'
)

// wrongKind returns the error of a decision of the wrong kind for l.
func (l *Limiter) wrongKind(what string) error {
	if l.rule.Algorithm == driver.AlgorithmInFlight {
		return fmt.Errorf("%w: %s on %s, an %v limiter: use Acquire (or AllowAll), which gives a lease to release", ErrWrongKind, what, l.cfg.name, driver.AlgorithmInFlight)
	}
	return fmt.Errorf("%w: %s on %s, a %v limiter: leases are for %v policies", ErrWrongKind, what, l.cfg.name, l.rule.Algorithm, driver.AlgorithmInFlight)
}

// ReleaseTimeout is the least time a release may wait for the store: a
// release runs on a context of its own, detached from the caller's (which
// may have ended: a client gone, a request canceled), bounded by the
// limiter's timeout or ReleaseTimeout, whichever is longer. A release that
// fails leaves the slot taken until the lease ends.
const ReleaseTimeout = time.Second

// A Lease is one slot of an InFlight limiter's key, held until Release,
// or until it ends Lease after it was acquired or last renewed. It is safe
// for concurrent use.
type Lease struct {
	l    *Limiter
	key  string
	id   driver.LeaseID
	open bool // given by the fail mode or shadow mode: the store holds no slot

	mu       sync.Mutex
	ends     time.Time // on the local clock: by when the store ends it, at the earliest
	released bool
}

// Key returns the key the lease is of.
func (s *Lease) Key() string { return s.key }

// ID returns the lease's opaque id, 23 URL-safe characters: what a client
// keeps to renew or release the lease later (Limiter.Lease reads it back).
func (s *Lease) ID() string {
	m := byte(heldMark)
	if s.open {
		m = openMark
	}
	return string(m) + s.id.String()
}

// Degraded reports that the lease was given without the store holding a
// slot for it: by FailOpen while the store could not decide, or by shadow
// mode for a refusal. Renew and Release accept it without the store.
func (s *Lease) Degraded() bool { return s.open }

// Ends returns when, on the local clock, the lease ends at the earliest if
// it is not renewed: Lease after the acquire or the last renewal was sent.
// The store ends it by its own clock, at or after that (the decision was
// made after it was sent).
func (s *Lease) Ends() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ends
}

// Limiter returns the limiter the lease is of.
func (s *Lease) Limiter() *Limiter { return s.l }

// Acquire takes a lease of key, or refuses, taking nothing. An allowed
// Result says how many slots remain free; a refused one says Remaining 0
// and RetryAfter, when the earliest current lease ends at the latest (an
// upper bound: a release may free a slot sooner). The *Lease is nil when
// refused.
//
// When the store cannot decide, the fail mode does: FailOpen gives a
// Degraded lease (Result.Degraded), which Renew and Release accept without
// the store; FailClosed refuses. In shadow mode a refusal gives a Degraded
// lease too, with Result.Shadowed. Acquire on a limiter whose policy is not
// InFlight is an error wrapping ErrWrongKind.
func (l *Limiter) Acquire(ctx context.Context, key string) (*Lease, Result, error) {
	if err := l.ready(); err != nil {
		return nil, Result{}, err
	}
	if l.rule.Algorithm != driver.AlgorithmInFlight {
		return nil, Result{}, l.wrongKind("Acquire")
	}
	if key == "" {
		return nil, Result{}, ErrInvalidKey
	}
	batch := []driver.Op{{Key: l.storeKey(key), Rule: l.rule, Cost: 1, Lease: newLeaseID()}}
	start := time.Now()
	var out [1]Result
	if err := l.do(ctx, batch, out[:], 0); err != nil {
		return nil, Result{}, err
	}
	res := out[0]
	if !res.Allowed {
		return nil, res, nil
	}
	return l.newLease(key, batch[0].Lease, res.Degraded || res.Shadowed, start), res, nil
}

func (l *Limiter) newLease(key string, id driver.LeaseID, open bool, sent time.Time) *Lease {
	return &Lease{l: l, key: key, id: id, open: open, ends: sent.Add(l.rule.Window)}
}

// Lease returns the lease of key whose opaque id (Lease.ID) a client kept,
// to renew or release it: an error wrapping ErrInvalidLease when id is not
// one Acquire gives, ErrWrongKind when l is not an InFlight limiter. It
// does not ask the store: a well-formed id of a lease that does not exist
// (ended, forged, or of another key) renews with ErrLeaseLost and releases
// nothing.
func (l *Limiter) Lease(key, id string) (*Lease, error) {
	if err := l.ready(); err != nil {
		return nil, err
	}
	if l.rule.Algorithm != driver.AlgorithmInFlight {
		return nil, l.wrongKind("Lease")
	}
	if key == "" {
		return nil, ErrInvalidKey
	}
	if len(id) == 0 || id[0] != heldMark && id[0] != openMark {
		return nil, fmt.Errorf("%w: a lease id begins with %q or %q", ErrInvalidLease, heldMark, openMark)
	}
	lid, err := driver.ParseLeaseID(id[1:])
	if err != nil {
		return nil, err
	}
	return &Lease{l: l, key: key, id: lid, open: id[0] == openMark}, nil
}

// leaseOp runs one renewal or release of s through the store, with the
// limiter's clock and deadline d.
func (s *Lease) leaseOp(ctx context.Context, op *driver.Op, timeout time.Duration) error {
	l := s.l
	if l.cfg.clock != nil {
		op.Now = l.cfg.clock()
		if err := driver.CheckTime("now", op.Now); err != nil {
			return fmt.Errorf("%w (the clock of limiter %s)", err, l.cfg.name)
		}
	}
	op.Deadline = time.Now().Add(timeout)
	batch := []driver.Op{*op}
	err := l.store.Do(ctx, batch)
	*op = batch[0]
	if op.Err == nil {
		op.Err = err
	}
	if op.Err == nil {
		l.observeExpired(op.Result.Expired)
	}
	return nil
}

// Renew extends the lease: it then ends Lease after the renewal, by the
// store's clock. A lease that had already ended (released, expired or
// reset) is not taken again: Renew fails with an error wrapping
// ErrLeaseLost, and the caller should stop the work it guarded.
//
// When the store cannot decide, the fail mode does: FailOpen reports the
// lease renewed (it may end in the store at its old time, and another
// holder take its slot); FailClosed returns an error wrapping
// ErrStoreUnavailable (the lease may or may not have been renewed). A
// Degraded lease is renewed without the store. In shadow mode a lost lease
// is reported renewed.
func (s *Lease) Renew(ctx context.Context) error {
	if s == nil || s.l == nil {
		return fmt.Errorf("%w: a nil Lease", ErrInvalidLease)
	}
	l := s.l
	start := time.Now()
	s.mu.Lock()
	released := s.released
	s.mu.Unlock()
	if released {
		return fmt.Errorf("sluice: %s: renew of a released lease of %q: %w", l.cfg.name, s.key, ErrLeaseLost)
	}
	if !s.open {
		op := driver.Op{Key: l.storeKey(s.key), Rule: l.rule, Renew: true, Lease: s.id}
		if err := s.leaseOp(ctx, &op, l.cfg.timeout); err != nil {
			return err
		}
		switch {
		case op.Err != nil && ctx.Err() != nil:
			return fmt.Errorf("sluice: %s: %w", l.cfg.name, ctx.Err())
		case op.Err != nil && errors.Is(op.Err, ErrInvalidTime):
			return fmt.Errorf("%w (the clock of limiter %s)", op.Err, l.cfg.name)
		case op.Err != nil:
			l.logStoreError(op.Err)
			if l.cfg.failMode == FailClosed && !l.cfg.shadow {
				return fmt.Errorf("%w: renew of a lease of %s: %w", ErrStoreUnavailable, l.cfg.name, op.Err)
			}
		case !op.Result.Allowed:
			l.observeLease(LeaseLost)
			if !l.cfg.shadow {
				return fmt.Errorf("sluice: %s: lease of %q had ended: %w", l.cfg.name, s.key, ErrLeaseLost)
			}
		default:
			l.observeLease(LeaseRenewed)
		}
	}
	s.mu.Lock()
	s.ends = start.Add(l.rule.Window)
	s.mu.Unlock()
	return nil
}

// Release ends the lease, freeing its slot, and reports whether it did: a
// second release, or the release of a lease that had already ended, frees
// nothing and is no error. It runs on a context detached from ctx (which
// may have ended), bounded by ReleaseTimeout or the limiter's timeout,
// whichever is longer. When the store cannot be reached the error wraps
// ErrStoreUnavailable, and the slot comes back when the lease ends. A
// Degraded lease is released without the store.
func (s *Lease) Release(ctx context.Context) (bool, error) {
	if s == nil || s.l == nil {
		return false, fmt.Errorf("%w: a nil Lease", ErrInvalidLease)
	}
	l := s.l
	s.mu.Lock()
	if s.released {
		s.mu.Unlock()
		return false, nil
	}
	s.released = true
	s.mu.Unlock()
	if s.open {
		return true, nil
	}
	timeout := max(l.cfg.timeout, ReleaseTimeout)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	op := driver.Op{Key: l.storeKey(s.key), Rule: l.rule, Cost: -1, Lease: s.id}
	if err := s.leaseOp(rctx, &op, timeout); err != nil {
		s.unrelease()
		return false, err
	}
	if op.Err != nil {
		s.unrelease()
		l.logStoreError(op.Err)
		return false, fmt.Errorf("%w: release of a lease of %s: %w", ErrStoreUnavailable, l.cfg.name, op.Err)
	}
	if op.Result.Allowed {
		l.observeLease(LeaseReleased)
	} else {
		l.observeLease(LeaseEnded)
	}
	return op.Result.Allowed, nil
}

// unrelease lets a release that failed be tried again.
func (s *Lease) unrelease() {
	s.mu.Lock()
	s.released = false
	s.mu.Unlock()
}

// leaseCheck builds the Op of an AllowAll check on an InFlight limiter: a
// Cost of 1 acquires a lease, 0 peeks.
func leaseCheck(i int, c Check, refunds bool) (driver.Op, error) {
	l := c.Limiter
	if err := l.ready(); err != nil {
		return driver.Op{}, err
	}
	switch {
	case refunds:
		return driver.Op{}, fmt.Errorf("check %d: %w", i, l.wrongKind("AllowEach"))
	case c.Plan != "":
		return driver.Op{}, fmt.Errorf("%w %q of %s (check %d): an %v limiter has no plans", ErrUnknownPlan, c.Plan, l.Name(), i, driver.AlgorithmInFlight)
	case c.Key == "":
		return driver.Op{}, ErrInvalidKey
	case c.Cost != 0 && c.Cost != 1:
		return driver.Op{}, &PolicyError{Err: ErrInvalidCost, Field: "Check.Cost",
			Reason: fmt.Sprintf("check %d: a check on an %v limiter costs 1 (a lease) or 0 (a peek), got %d", i, driver.AlgorithmInFlight, c.Cost)}
	}
	op := driver.Op{Key: l.storeKey(c.Key), Rule: l.rule, Cost: c.Cost}
	if c.Cost == 1 {
		op.Lease = newLeaseID()
	}
	return op, nil
}

// leasesOf returns the leases an allowed AllowAll took (one per check, nil
// for the checks that took none), or nil when no check took one.
func leasesOf(checks []Check, ops []driver.Op, results []Result, start time.Time) []*Lease {
	var out []*Lease
	for i, op := range ops {
		res := results[i]
		if op.Lease.IsZero() || op.Renew || op.Cost != 1 || !res.Allowed {
			continue
		}
		if out == nil {
			out = make([]*Lease, len(ops))
		}
		out[i] = checks[i].Limiter.newLease(checks[i].Key, op.Lease, res.Degraded || res.Shadowed, start)
	}
	return out
}

// checkInFlightOptions refuses the options an InFlight limiter cannot
// honour: plans and overrides (Acquire names neither), a deny cache (a
// release may free a slot at any time, so a refusal says nothing of the
// next request), and a warning threshold (a rate limit's; sluice serve
// refuses warn_at on in_flight alike).
func checkInFlightOptions(r Rule, cfg *config) error {
	if r.Algorithm != driver.AlgorithmInFlight {
		return nil
	}
	switch {
	case len(cfg.plans) > 0:
		return invalidField("WithPlan", "an %v limiter has no plans", driver.AlgorithmInFlight)
	case cfg.ovOn:
		return invalidField("WithOverrides", "an %v limiter takes no overrides", driver.AlgorithmInFlight)
	case cfg.deny == 1:
		return invalidField("WithDenyCache", "WithDenyCache(true): an %v limiter never uses the deny cache (a release may free a slot at any time)", driver.AlgorithmInFlight)
	case cfg.warnSet:
		return invalidField("WithWarning", "an %v limiter gives no warnings: WithWarning is for rate limits (the part of a window's limit used), as warn_at is in sluice serve", driver.AlgorithmInFlight)
	}
	return nil
}

// Hold keeps leases for the work ctx runs: it renews them while the work
// outlives their Lease (every third of the shortest Lease), and returns a
// context for the work, canceled with the renewal's error as its cause
// (context.Cause: wrapping ErrLeaseLost, or ErrStoreUnavailable under
// FailClosed) when a renewal fails, since the work is then no longer
// counted. It releases every lease when stop is called (call it when the
// work returns, or panics: defer it), when ctx ends (the client went
// away), or when a renewal fails. stop waits for that and may be called
// more than once. Nil leases are skipped.
func Hold(ctx context.Context, leases ...*Lease) (work context.Context, stop func()) {
	var held []*Lease
	var every time.Duration
	for _, ls := range leases {
		if ls == nil || ls.l == nil {
			continue
		}
		held = append(held, ls)
		if p := ls.l.rule.Window / 3; every == 0 || p < every {
			every = p
		}
	}
	work, cancel := context.WithCancelCause(ctx)
	if len(held) == 0 {
		return work, func() { cancel(nil) }
	}
	done := make(chan struct{})
	exited := make(chan struct{})
	release := func() {
		for _, ls := range held {
			if _, err := ls.Release(ctx); err != nil {
				ls.l.cfg.logger.Warn("sluice: release failed; the slot comes back when the lease ends", "limiter", ls.l.cfg.name, "err", err)
			}
		}
	}
	go func() {
		defer close(exited)
		defer release()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				cancel(context.Cause(ctx))
				return
			case <-t.C:
				for _, ls := range held {
					if err := ls.Renew(ctx); err != nil {
						cancel(err)
						return
					}
				}
			}
		}
	}()
	var once sync.Once
	return work, func() {
		once.Do(func() {
			close(done)
			<-exited
			cancel(nil)
		})
	}
}

// A LeaseEvent is what became of a lease after its acquire (acquires and
// refusals are decisions: Observer.ObserveDecision).
type LeaseEvent uint8

// The lease events.
const (
	// LeaseReleased: a release freed the lease's slot.
	LeaseReleased LeaseEvent = iota + 1
	// LeaseEnded: a release found the lease already ended (expired, reset
	// or released before): its slot had come back on its own.
	LeaseEnded
	// LeaseRenewed: a renewal extended the lease.
	LeaseRenewed
	// LeaseLost: a renewal found the lease ended (ErrLeaseLost).
	LeaseLost
	// LeaseExpired: the store reaped the lease because its Lease passed
	// without a release or renewal (its holder crashed or forgot it). One
	// event per lease, told when a decision on its key (an acquire, peek,
	// renewal or release, by any process) reaps it, so it is counted when
	// the key is next used: the leases of a key nobody uses again end with
	// the key, uncounted. A released or reset lease is never expired; a
	// release or renewal that finds its lease expired is LeaseEnded or
	// LeaseLost as well (its caller's view).
	LeaseExpired
)

// String returns "released", "ended", "renewed", "lost" or "expired".
func (e LeaseEvent) String() string {
	switch e {
	case LeaseReleased:
		return "released"
	case LeaseEnded:
		return "ended"
	case LeaseRenewed:
		return "renewed"
	case LeaseLost:
		return "lost"
	case LeaseExpired:
		return "expired"
	}
	return "LeaseEvent(" + fmt.Sprint(uint8(e)) + ")"
}

// A LeaseObserver is an Observer (WithObserver) that is also told what
// became of the leases of an InFlight limiter: released, ended before
// their release, renewed, lost at a renewal, expired. Events the store decided only;
// a Degraded lease has none. Package sluiceprom implements it.
type LeaseObserver interface {
	ObserveLease(limiter string, event LeaseEvent)
}

// observeLease tells l's observer of ev, if it is a LeaseObserver.
func (l *Limiter) observeLease(ev LeaseEvent) {
	if o, ok := l.cfg.observer.(LeaseObserver); ok {
		o.ObserveLease(l.cfg.name, ev)
	}
}

// observeExpired tells l's observer of n leases the store reaped as
// expired (driver.Result.Expired), one LeaseExpired each.
func (l *Limiter) observeExpired(n int64) {
	if n <= 0 {
		return
	}
	if o, ok := l.cfg.observer.(LeaseObserver); ok {
		for range n {
			o.ObserveLease(l.cfg.name, LeaseExpired)
		}
	}
}
