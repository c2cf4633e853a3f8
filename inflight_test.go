package sluice_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
)

func TestInFlightPolicy(t *testing.T) {
	r, err := sluice.InFlight{Limit: 20, Lease: 30 * time.Second}.Rule()
	if err != nil || r.Algorithm != driver.AlgorithmInFlight || r.Limit != 20 || r.Window != 30*time.Second {
		t.Fatalf("Rule: %+v, %v", r, err)
	}
	if s := r.String(); s != "in_flight(limit=20, lease=30s)" {
		t.Errorf("String: %q", s)
	}
	for _, p := range []sluice.InFlight{{Limit: 0, Lease: time.Second}, {Limit: driver.MaxInFlightLimit + 1, Lease: time.Second},
		{Limit: 1, Lease: 0}, {Limit: 1, Lease: time.Microsecond}, {Limit: 1, Lease: time.Second + time.Nanosecond}, {Limit: 1, Lease: driver.MaxWindow + time.Second}} {
		if _, err := p.Rule(); !errors.Is(err, sluice.ErrInvalidPolicy) {
			t.Errorf("%+v: %v, want ErrInvalidPolicy", p, err)
		}
	}
	a, err := driver.ParseAlgorithm("in_flight")
	if err != nil || a != driver.AlgorithmInFlight {
		t.Fatalf("ParseAlgorithm: %v, %v", a, err)
	}
	if err := a.Takes(driver.Params{Limit: 5, Lease: time.Minute}); err != nil {
		t.Fatalf("Takes: %v", err)
	}
	for _, p := range []driver.Params{{Limit: 5, Lease: time.Minute, Window: time.Second}, {Limit: 5, Lease: time.Minute, Rate: 1, Per: time.Second}} {
		if err := a.Takes(p); !errors.Is(err, sluice.ErrInvalidPolicy) {
			t.Errorf("in_flight with %+v: %v, want ErrInvalidPolicy", p, err)
		}
	}
	if err := driver.AlgorithmGCRA.Takes(driver.Params{Limit: 5, Rate: 1, Per: time.Second, Lease: time.Minute}); !errors.Is(err, sluice.ErrInvalidPolicy) {
		t.Errorf("gcra with a Lease: %v, want ErrInvalidPolicy", err)
	}
	// Reservations settle an estimate; a lease has none: refused, saying so.
	if _, err := sluice.New(memstore.New(), sluice.InFlight{Limit: 2, Lease: time.Second}, sluice.WithReservations(sluice.ReserveOptions{})); !errors.Is(err, sluice.ErrInvalidPolicy) ||
		!strings.Contains(sluice.Reason(err), "in_flight limits how many things run at once") {
		t.Errorf("New with WithReservations: %v, want ErrInvalidPolicy with the reason", err)
	}
	st := memstore.New()
	pol := sluice.InFlight{Limit: 2, Lease: time.Second}
	for name, opt := range map[string]sluice.Option{
		"plan":       sluice.WithPlan("pro", sluice.InFlight{Limit: 5, Lease: time.Second}),
		"overrides":  sluice.WithOverrides(true),
		"deny cache": sluice.WithDenyCache(true),
		"warning":    sluice.WithWarning(80),
	} {
		if _, err := sluice.New(st, pol, opt); !errors.Is(err, sluice.ErrInvalidPolicy) {
			t.Errorf("New with %s: %v, want ErrInvalidPolicy", name, err)
		}
	}
	// As sluice serve refuses warn_at on an in_flight policy, with the reason.
	if _, err := sluice.New(st, pol, sluice.WithWarning(80)); !strings.Contains(sluice.Reason(err), "WithWarning is for rate limits") {
		t.Errorf("New with WithWarning: %v, want the reason", err)
	}
	l, err := sluice.New(st, pol)
	if err != nil {
		t.Fatal(err)
	}
	if k := driver.Key(sluice.DefaultPrefix, l.Name(), l.Rule(), "k"); l.Name() != "if-2-1000000" || !strings.Contains(k, ":if1:{k}") {
		t.Errorf("name %q, key %q", l.Name(), k)
	}
}

// TestOpValidateLease: the lease fields of an Op must fit its kind.
func TestOpValidateLease(t *testing.T) {
	rule, _ := sluice.InFlight{Limit: 2, Lease: time.Second}.Rule()
	id := driver.LeaseID{1}
	for _, op := range []driver.Op{
		{Rule: rule, Cost: 2, Lease: id},
		{Rule: rule, Cost: 1},
		{Rule: rule, Cost: -1},
		{Rule: rule, Renew: true},
		{Rule: rule, Renew: true, Cost: 1, Lease: id},
		{Rule: rule, Lease: id},
		{Rule: sluice.Rule{Algorithm: driver.AlgorithmFixedWindow, Limit: 1, Window: time.Second}, Cost: 1, Lease: id},
		{Rule: sluice.Rule{Algorithm: driver.AlgorithmFixedWindow, Limit: 1, Window: time.Second}, Renew: true},
	} {
		if err := op.Validate(); err == nil {
			t.Errorf("%+v: no error", op)
		}
	}
	for _, op := range []driver.Op{{Rule: rule, Cost: 1, Lease: id}, {Rule: rule, Cost: -1, Lease: id}, {Rule: rule, Renew: true, Lease: id}, {Rule: rule}} {
		if err := op.Validate(); err != nil {
			t.Errorf("%+v: %v", op, err)
		}
	}
}

// switchStore is a memstore that fails every decision while down is set,
// and counts the decisions it is asked for.
type switchStore struct {
	*memstore.Store
	down  atomic.Bool
	calls atomic.Int64
}

func (s *switchStore) Do(ctx context.Context, batch []driver.Op) error {
	s.calls.Add(int64(len(batch)))
	if s.down.Load() {
		for i := range batch {
			batch[i].Err = errors.New("connection refused")
		}
		return nil
	}
	return s.Store.Do(ctx, batch)
}

func TestInFlightFailOpen(t *testing.T) {
	ctx := context.Background()
	st := &switchStore{Store: memstore.New()}
	l, err := sluice.New(st, sluice.InFlight{Limit: 1, Lease: time.Minute}, sluice.WithFailMode(sluice.FailOpen))
	if err != nil {
		t.Fatal(err)
	}
	held, _, err := l.Acquire(ctx, "k")
	if err != nil || held == nil || held.Degraded() || held.ID()[0] != 'h' {
		t.Fatalf("Acquire: %v, %v", held, err)
	}
	st.down.Store(true)
	ls, res, err := l.Acquire(ctx, "k")
	if err != nil || !res.Allowed || !res.Degraded || ls == nil || !ls.Degraded() || ls.ID()[0] != 'o' {
		t.Fatalf("Acquire with the store down, fail open: %v %+v %v", ls, res, err)
	}
	// A held lease's renewal is reported done when the store cannot say.
	if err := held.Renew(ctx); err != nil {
		t.Fatalf("Renew with the store down, fail open: %v", err)
	}
	// The degraded lease renews and releases without the store, as the
	// same lease read back from its id does.
	st.down.Store(false)
	before := st.calls.Load()
	back, err := l.Lease("k", ls.ID())
	if err != nil || !back.Degraded() {
		t.Fatalf("Lease of a degraded id: %v, %v", back, err)
	}
	for _, x := range []*sluice.Lease{ls, back} {
		if err := x.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		if ok, err := x.Release(ctx); !ok || err != nil {
			t.Fatalf("Release of a degraded lease: %v, %v", ok, err)
		}
	}
	if n := st.calls.Load() - before; n != 0 {
		t.Fatalf("a degraded lease asked the store %d times", n)
	}
	// A release that cannot reach the store reports it, and may be tried
	// again.
	st.down.Store(true)
	if ok, err := held.Release(ctx); ok || !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Fatalf("Release with the store down: %v, %v", ok, err)
	}
	st.down.Store(false)
	if ok, err := held.Release(ctx); !ok || err != nil {
		t.Fatalf("Release again: %v, %v", ok, err)
	}
}

func TestInFlightFailClosed(t *testing.T) {
	ctx := context.Background()
	st := &switchStore{Store: memstore.New()}
	l, err := sluice.New(st, sluice.InFlight{Limit: 1, Lease: time.Minute}, sluice.WithFailMode(sluice.FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	held, _, err := l.Acquire(ctx, "k")
	if err != nil || held == nil {
		t.Fatal(err)
	}
	st.down.Store(true)
	ls, res, err := l.Acquire(ctx, "k2")
	if err != nil || res.Allowed || !res.Degraded || res.RetryAfter != time.Second || ls != nil {
		t.Fatalf("Acquire with the store down, fail closed: %v %+v %v", ls, res, err)
	}
	if err := held.Renew(ctx); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Fatalf("Renew with the store down, fail closed: %v", err)
	}
	st.down.Store(false)
	if err := held.Renew(ctx); err != nil {
		t.Fatalf("Renew once the store is back: %v", err)
	}
}

func TestInFlightShadow(t *testing.T) {
	ctx := context.Background()
	l, err := sluice.New(memstore.New(), sluice.InFlight{Limit: 1, Lease: time.Minute}, sluice.WithShadow(true))
	if err != nil {
		t.Fatal(err)
	}
	a, _, _ := l.Acquire(ctx, "k")
	b, res, err := l.Acquire(ctx, "k")
	if err != nil || !res.Allowed || !res.Shadowed || b == nil || !b.Degraded() {
		t.Fatalf("a refusal in shadow mode: %v %+v %v", b, res, err)
	}
	if ok, _ := a.Release(ctx); !ok {
		t.Fatal("the held lease was not released")
	}
}

// TestHold: Hold renews a lease while the work outlives Lease, releases
// it when stopped or when ctx ends, and cancels the work's context with
// ErrLeaseLost as its cause when a renewal finds the lease ended.
func TestHold(t *testing.T) {
	const lease = 300 * time.Millisecond
	st := memstore.New()
	l, err := sluice.New(st, sluice.InFlight{Limit: 1, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	free := func() bool {
		res, err := l.Peek(ctx, "k")
		return err == nil && res.Allowed
	}
	ls, _, _ := l.Acquire(ctx, "k")
	work, stop := sluice.Hold(ctx, ls, nil)
	time.Sleep(3 * lease) // renewed meanwhile
	if free() || work.Err() != nil {
		t.Fatalf("the held lease ended while held (free %v, ctx %v)", free(), work.Err())
	}
	stop()
	stop()
	if !free() {
		t.Fatal("stop did not release the lease")
	}
	// The client goes away: released.
	ls, _, _ = l.Acquire(ctx, "k")
	cctx, cancel := context.WithCancel(ctx)
	_, stop = sluice.Hold(cctx, ls)
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for !free() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !free() {
		t.Fatal("the lease was not released when ctx ended")
	}
	stop()
	// A renewal finds the lease gone (reset): the work is canceled with
	// the cause.
	ls, _, _ = l.Acquire(ctx, "k")
	work, stop = sluice.Hold(ctx, ls)
	defer stop()
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-work.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the work's context was not canceled when its lease was lost")
	}
	if cause := context.Cause(work); !errors.Is(cause, sluice.ErrLeaseLost) {
		t.Fatalf("cause %v, want ErrLeaseLost", cause)
	}
}

// leaseRecorder is an Observer and LeaseObserver that counts lease events.
type leaseRecorder struct {
	mu     sync.Mutex
	events map[sluice.LeaseEvent]int
}

func (r *leaseRecorder) ObserveDecision(string, sluice.Result, error, time.Duration) {}

func (r *leaseRecorder) ObserveLease(_ string, ev sluice.LeaseEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.events == nil {
		r.events = map[sluice.LeaseEvent]int{}
	}
	r.events[ev]++
}

func (r *leaseRecorder) count(ev sluice.LeaseEvent) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.events[ev]
}

// TestLeaseExpiredObserved: the leases a decision's store reaped as
// expired reach the LeaseObserver, one LeaseExpired each, from an acquire,
// a peek, a renewal or a release; a released lease never.
func TestLeaseExpiredObserved(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	rec := &leaseRecorder{}
	l, err := sluice.New(memstore.New(), sluice.InFlight{Limit: 3, Lease: 10 * time.Second},
		sluice.WithObserver(rec), sluice.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	acquire := func() *sluice.Lease {
		t.Helper()
		ls, res, err := l.Acquire(ctx, "k")
		if err != nil || !res.Allowed {
			t.Fatalf("Acquire: %+v, %v", res, err)
		}
		return ls
	}
	expect := func(what string, want int) {
		t.Helper()
		if got := rec.count(sluice.LeaseExpired); got != want {
			t.Fatalf("%s: %d expired, want %d", what, got, want)
		}
	}
	a, b := acquire(), acquire()
	now = now.Add(5 * time.Second)
	c := acquire()
	now = now.Add(5 * time.Second) // a and b end
	if _, err := l.Peek(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	expect("a peek after two leases ended", 2)
	if ok, err := c.Release(ctx); !ok || err != nil {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	if ok, err := a.Release(ctx); ok || err != nil {
		t.Fatalf("Release of an expired lease: %v, %v", ok, err)
	}
	if err := b.Renew(ctx); !errors.Is(err, sluice.ErrLeaseLost) {
		t.Fatalf("Renew of an expired lease: %v", err)
	}
	expect("releases and a lost renewal after", 2)
	d := acquire()
	now = now.Add(10 * time.Second)
	if err := d.Renew(ctx); !errors.Is(err, sluice.ErrLeaseLost) {
		t.Fatalf("Renew of an expired lease: %v", err)
	}
	expect("a renewal that reaped its own lease", 3)
	if got := sluice.LeaseExpired.String(); got != "expired" {
		t.Errorf("String: %q", got)
	}
}
