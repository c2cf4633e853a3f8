package valkeystore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/valkeytest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/valkeystore"
)

// TestDifferentialCalendar runs random operations on calendar quotas of
// the conformance suite's zones and periods, at instants drawn around
// their period edges, on memstore and on Valkey: every Result and receipt
// must be identical.
func TestDifferentialCalendar(t *testing.T) {
	c := valkeytest.Shared(t).Client(t)
	d := &differ{t: t, mem: memstore.New(), vk: newStore(t, c), prefix: sluicetest.Prefix(t)}
	rng := rand.New(rand.NewPCG(3, 5))
	for ci, cc := range sluicetest.CalendarCases {
		p := cc.Policy(t, int64(1+rng.IntN(4)))
		p.CountRejected = rng.IntN(2) == 0
		rule, err := p.Rule()
		if err != nil {
			t.Fatal(err)
		}
		_, start, end := cc.Times(t)
		now := start.Add(-time.Hour)
		for i := range 60 {
			key := sluice.Key(d.prefix, fmt.Sprintf("c%d", ci), rule, fmt.Sprint(rng.IntN(2)))
			switch rng.IntN(4) {
			case 0:
				now = now.Add(time.Microsecond)
			case 1: // to an edge, or just before it
				edge := [...]time.Time{start, end}[rng.IntN(2)]
				now = edge.Add(-time.Duration(rng.IntN(2)) * time.Microsecond)
			default:
				now = now.Add(time.Duration(rng.Int64N(int64(3 * time.Hour))))
			}
			cost := int64(rng.IntN(int(rule.Limit) + 1))
			var receipt int64
			if rng.IntN(6) == 0 {
				cost = -1
				receipt = d.receipt(key, rng.IntN(8)-1, now)
			}
			d.step(fmt.Sprintf("%s op %d (%v, cost %d, at %v)", cc.Name, i, rule, cost, now),
				sluice.Op{Key: key, Rule: rule, Cost: cost, Now: now, Receipt: receipt})
		}
	}
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
	s := newStore(t, c)
	rule, err := sluice.FixedWindow{Limit: 3, Calendar: sluice.Calendar{Unit: sluice.Day, Zone: time.UTC}}.Rule()
	if err != nil {
		t.Fatal(err)
	}
	key := sluice.Key(sluicetest.Prefix(t), "skew", rule, "k")
	// A client three days ahead is played through the bounds it sends.
	ops := []sluice.Op{{Key: key, Rule: rule, Cost: 1}}
	skewed := valkeystore.ValkeystoreSkew(t, s, ops, 3*24*time.Hour)
	if !errors.Is(skewed, sluice.ErrClockSkew) {
		t.Fatalf("a client 3 days ahead: %v, want ErrClockSkew", skewed)
	}
	ops = []sluice.Op{{Key: key, Rule: rule, Cost: 1}}
	if err := valkeystore.ValkeystoreSkew(t, s, ops, 12*time.Hour); err != nil {
		t.Fatalf("a client 12 hours ahead (within a period): %v", err)
	}
}
