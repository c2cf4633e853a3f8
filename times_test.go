package sluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
)

// TestClockOutOfRange: a limiter whose clock no store keeps refuses its
// decisions with ErrInvalidTime, alone or in AllowAll and AllowEach, where
// no other check takes anything meanwhile.
func TestClockOutOfRange(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	p := sluice.FixedWindow{Limit: 2, Window: time.Minute}
	good, err := sluice.New(st, p, sluice.WithName("good"), sluice.WithClock(func() time.Time { return time.Unix(1_800_000_000, 0) }))
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Time{time.Unix(0, 0), time.Unix(0, 999), time.Unix(-1, 0), driver.MaxTime.Add(time.Nanosecond)} {
		bad, err := sluice.New(st, p, sluice.WithName("bad"), sluice.WithClock(func() time.Time { return at }))
		if err != nil {
			t.Fatal(err)
		}
		if res, err := bad.Allow(ctx, "k"); !errors.Is(err, sluice.ErrInvalidTime) || res.Degraded {
			t.Fatalf("clock at %v: %+v %v", at, res, err)
		}
		checks := []sluice.Check{{Limiter: good, Key: "k", Cost: 1}, {Limiter: bad, Key: "k", Cost: 1}}
		if _, err := sluice.AllowAll(ctx, checks); !errors.Is(err, sluice.ErrInvalidTime) {
			t.Fatalf("AllowAll, clock at %v: %v", at, err)
		}
		if _, err := sluice.AllowEach(ctx, checks); !errors.Is(err, sluice.ErrInvalidTime) {
			t.Fatalf("AllowEach, clock at %v: %v", at, err)
		}
		if res, err := good.Peek(ctx, "k"); err != nil || res.Remaining != 2 {
			t.Fatalf("clock at %v: the good limiter's count after the refusals: %+v %v, want nothing taken", at, res, err)
		}
	}
	for _, at := range []time.Time{driver.MinTime, driver.MaxTime} {
		l, err := sluice.New(st, p, sluice.WithName("edge"), sluice.WithClock(func() time.Time { return at }))
		if err != nil {
			t.Fatal(err)
		}
		if res, err := l.Allow(ctx, "k"); err != nil || !res.Allowed || res.Degraded {
			t.Fatalf("clock at %v: %+v %v", at, res, err)
		}
	}
}
