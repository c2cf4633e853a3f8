package valkeystore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
)

// TestDifferentialCalendar: see sluicetest.RunDifferentialCalendar.
func TestDifferentialCalendar(t *testing.T) {
	sluicetest.RunDifferentialCalendar(t, harness(t, valkeytest.Shared(t).Client(t)))
}

// TestCalendarServerClock checks that without a client clock the script
// picks the period with Valkey's TIME, and that the period's real end is
// what ResetAfter reports.
func TestCalendarServerClock(t *testing.T) {
	c := valkeytest.Shared(t).Client(t)
	s := newStore(t, c)
	for _, zone := range []string{"America/Los_Angeles", "Asia/Kathmandu", "UTC"} {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		for _, cal := range []sluice.Calendar{{Unit: sluice.Day, Zone: loc}, {Unit: sluice.Week, Zone: loc}, {Unit: sluice.Month, Zone: loc, RenewalDay: 31}} {
			l, err := sluice.New(s, sluice.FixedWindow{Limit: 3, Calendar: cal}, sluice.WithPrefix(sluicetest.Prefix(t)), sluice.WithTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			before := time.Now()
			res, err := l.Allow(context.Background(), "k")
			after := time.Now()
			if err != nil || !res.Allowed || res.Remaining != 2 || res.Degraded {
				t.Fatalf("%v: %+v %v", cal, res, err)
			}
			// The period's end as this host sees it, give or take the call.
			_, end := cal.Span(after)
			if lo, hi := end.Sub(after), end.Sub(before); res.ResetAfter < lo-time.Second || res.ResetAfter > hi+time.Second {
				t.Errorf("%v: ResetAfter %v, want the period's end, in [%v, %v]", cal, res.ResetAfter, lo, hi)
			}
		}
	}
}

// TestCalendarClockSkew checks that a client whose clock is more than a
// period away from Valkey's gets ErrClockSkew rather than a decision in
// the wrong period.
func TestCalendarClockSkew(t *testing.T) {
	c := valkeytest.Shared(t).Client(t)
	s := newStore(t, c, valkeystore.WithProbe(new(valkeystore.Probe)))
	rule, err := sluice.FixedWindow{Limit: 3, Calendar: sluice.Calendar{Unit: sluice.Day, Zone: time.UTC}}.Rule()
	if err != nil {
		t.Fatal(err)
	}
	key := driver.Key(sluicetest.Prefix(t), "skew", rule, "k")
	// A client three days ahead is played through the bounds it sends.
	ops := []driver.Op{{Key: key, Rule: rule, Cost: 1}}
	skewed := valkeystore.SkewedDo(t, s, ops, 3*24*time.Hour)
	if !errors.Is(skewed, driver.ErrClockSkew) {
		t.Fatalf("a client 3 days ahead: %v, want ErrClockSkew", skewed)
	}
	ops = []driver.Op{{Key: key, Rule: rule, Cost: 1}}
	if err := valkeystore.SkewedDo(t, s, ops, 12*time.Hour); err != nil {
		t.Fatalf("a client 12 hours ahead (within a period): %v", err)
	}
}
