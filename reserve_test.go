package sluice_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// downReserver fails every reservation and settle, as a store that is down.
type downReserver struct{ brokenStore }

func (downReserver) Reserve(_ context.Context, b []driver.ReserveOp) error {
	for i := range b {
		b[i].Err = errors.New("connection refused")
	}
	return nil
}

func (downReserver) Settle(_ context.Context, b []driver.SettleOp) error {
	for i := range b {
		b[i].Err = errors.New("connection refused")
	}
	return nil
}

func rsvLimiter(t *testing.T, st driver.Store, p sluice.Policy, name string, clock func() time.Time, opts ...sluice.Option) *sluice.Limiter {
	t.Helper()
	l, err := sluice.New(st, p, append([]sluice.Option{sluice.WithName(name), sluice.WithClock(clock), sluice.WithDenyCache(false),
		sluice.WithLogger(slog.New(slog.DiscardHandler)), sluice.WithReservations(sluice.ReserveOptions{})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestReserveAllRefusalTakesNothing: requests per minute and tokens per
// minute reserved together; when tokens refuse, the request's unit is
// given back; when both allow, they settle together.
func TestReserveAllRefusalTakesNothing(t *testing.T) {
	ctx := context.Background()
	clock := sluicetest.NewClock()
	st := memstore.New()
	rpm := rsvLimiter(t, st, sluice.TokenBucket{Capacity: 3, Rate: 3, Per: time.Minute}, "rpm", clock.Now)
	tpm := rsvLimiter(t, st, sluice.TokenBucket{Capacity: 1000, Rate: 1000, Per: time.Minute}, "tpm", clock.Now)
	day := rsvLimiter(t, st, sluice.FixedWindow{Limit: 5000, Window: 24 * time.Hour}, "day", clock.Now)
	checks := func(tokens int64) []sluice.Check {
		return []sluice.Check{{Limiter: rpm, Key: "t", Cost: 1}, {Limiter: tpm, Key: "t", Cost: tokens}, {Limiter: day, Key: "t", Cost: tokens}}
	}
	d, err := sluice.ReserveAll(ctx, checks(800))
	if err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	// 900 more tokens do not fit: refused, and rpm and day get theirs back.
	d2, err := sluice.ReserveAll(ctx, checks(900))
	if err != nil || d2.Allowed || d2.Reservations[0].ID != "" || d2.RetryAfter() <= 0 {
		t.Fatalf("%+v %v", d2, err)
	}
	if r, _ := rpm.Peek(ctx, "t"); r.Remaining != 2 {
		t.Errorf("rpm after a refused request: %d left, want 2", r.Remaining)
	}
	if r, _ := day.Peek(ctx, "t"); r.Remaining != 4200 {
		t.Errorf("day after a refused request: %d left, want 4200", r.Remaining)
	}
	// Settled together: 300 tokens used of 800 reserved.
	var sc []sluice.SettleCheck
	for i, r := range d.Reservations {
		actual := int64(300)
		if i == 0 {
			actual = 1
		}
		sc = append(sc, sluice.SettleCheck{Limiter: r.Limiter(), Key: "t", Reservation: r.ID, Actual: actual})
	}
	out, err := sluice.SettleAll(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range out {
		if s.Err != nil || !s.Settled {
			t.Errorf("settle %d: %+v", i, s)
		}
	}
	if out[1].Remaining != 700 || out[2].Remaining != 4700 {
		t.Errorf("after settling 300 of 800: tpm %d, day %d left, want 700 and 4700", out[1].Remaining, out[2].Remaining)
	}
}

// TestReservationNeverSettledStaysCharged: a reservation never settled
// keeps its estimate; once its record expires (Life), a settle is unknown
// and changes nothing.
func TestReservationNeverSettledStaysCharged(t *testing.T) {
	ctx := context.Background()
	clock := sluicetest.NewClock()
	st := memstore.New(memstore.WithClock(clock.Now))
	l := rsvLimiter(t, st, sluice.FixedWindow{Limit: 10, Window: time.Hour}, "fw", clock.Now,
		sluice.WithReservations(sluice.ReserveOptions{Life: time.Minute}))
	r, err := l.Reserve(ctx, "k", 6)
	if err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	clock.Advance(time.Minute)
	if res, _ := l.Peek(ctx, "k"); res.Remaining != 4 {
		t.Errorf("unsettled: %d left, want 4", res.Remaining)
	}
	if _, err := l.Settle(ctx, "k", r.ID, 0); !errors.Is(err, sluice.ErrUnknownReservation) {
		t.Errorf("settle after the record's life: %v, want ErrUnknownReservation", err)
	}
	if res, _ := l.Peek(ctx, "k"); res.Remaining != 4 {
		t.Errorf("after a late settle: %d left, want 4", res.Remaining)
	}
}

// TestDegradedReservationSettlesWithoutStore: with the store down, a
// fail-open limiter's reservation is allowed, degraded, and settles
// without the store; a fail-closed one refuses; a settle of a recorded
// reservation reports the store unavailable.
func TestDegradedReservationSettlesWithoutStore(t *testing.T) {
	ctx := context.Background()
	l := rsvLimiter(t, downReserver{}, sluice.GCRA{Rate: 1, Per: time.Second, Burst: 5}, "g", time.Now)
	r, err := l.Reserve(ctx, "k", 3)
	if err != nil || !r.Allowed || !r.Degraded || r.ID == "" {
		t.Fatalf("%+v %v", r, err)
	}
	s, err := r.Settle(ctx, 10)
	if err != nil || !s.Settled || !s.Degraded {
		t.Errorf("degraded settle: %+v %v", s, err)
	}
	closed := rsvLimiter(t, downReserver{}, sluice.GCRA{Rate: 1, Per: time.Second, Burst: 5}, "g", time.Now, sluice.WithFailMode(sluice.FailClosed))
	if r, err := closed.Reserve(ctx, "k", 3); err != nil || r.Allowed || r.ID != "" {
		t.Errorf("fail closed: %+v %v", r, err)
	}
	good := rsvLimiter(t, memstore.New(), sluice.GCRA{Rate: 1, Per: time.Second, Burst: 5}, "g", time.Now)
	rr, _ := good.Reserve(ctx, "k", 1)
	if _, err := l.Settle(ctx, "k", rr.ID, 1); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Errorf("settle with the store down: %v, want ErrStoreUnavailable", err)
	}
}

// TestReservationsRefusedAtConstruction: a store that keeps no
// reservations is refused with the reason.
func TestReservationsRefusedAtConstruction(t *testing.T) {
	_, err := sluice.New(brokenStore{}, sluice.GCRA{Rate: 1, Per: time.Second, Burst: 5}, sluice.WithReservations(sluice.ReserveOptions{}))
	if !errors.Is(err, sluice.ErrInvalidPolicy) || sluice.Reason(err) == "" {
		t.Errorf("%v", err)
	}
}

// TestDenyCacheInDebt: a key in debt is refused from the deny cache with
// the store's own answer (RetryAfter exact, Remaining never negative),
// and a give-back reaches the cache at once.
func TestDenyCacheInDebt(t *testing.T) {
	ctx := context.Background()
	clock := sluicetest.NewClock()
	st := memstore.New()
	p := sluice.TokenBucket{Capacity: 10, Rate: 1, Per: time.Second}
	cached := rsvLimiter(t, st, p, "tb", clock.Now, sluice.WithDenyCache(true))
	truth := rsvLimiter(t, st, p, "tb", clock.Now, sluice.WithDenyCache(false))
	r, _ := cached.Reserve(ctx, "k", 10)
	if s, err := r.Settle(ctx, 15); err != nil || s.Debt != 5 || s.RetryAfter != 6*time.Second {
		t.Fatalf("%+v %v", s, err)
	}
	for range 3 {
		got, _ := cached.Allow(ctx, "k")
		want, _ := truth.Peek(ctx, "k") // a refused Allow takes nothing: the same answer
		if got != want || got.Allowed || got.Remaining != 0 {
			t.Fatalf("in debt: cache %+v, store %+v", got, want)
		}
		clock.Advance(1500 * time.Millisecond)
	}
	// A give-back by this limiter reaches its cache.
	r2, _ := truth.Reserve(ctx, "j", 10)
	if res, _ := cached.Allow(ctx, "j"); res.Allowed {
		t.Fatal("j should be empty")
	}
	if _, err := cached.Settle(ctx, "j", r2.ID, 0); err != nil {
		t.Fatal(err)
	}
	if res, _ := cached.Allow(ctx, "j"); !res.Allowed {
		t.Errorf("after a give-back: %+v, want allowed", res)
	}
}
