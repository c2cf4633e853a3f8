package sluice_test

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/luascript"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// refLabel names the calendar period that holds t, computed plainly: the
// date, ISO week, or month counted from the renewal day (clamped to the
// month's length, found by walking the days).
func refLabel(t time.Time, c sluice.Calendar) int {
	l := t.In(c.Zone)
	y, m, d := l.Date()
	switch c.Unit {
	case sluice.Week:
		wy, wn := l.ISOWeek()
		return wy*100 + wn
	case sluice.Month:
		last := 28
		for last < 31 && time.Date(y, m, last+1, 12, 0, 0, 0, time.UTC).Month() == m {
			last++
		}
		n := y*12 + int(m)
		if d < min(c.RenewalDay, last) {
			n--
		}
		return n
	}
	return y*10000 + int(m)*100 + d
}

// refSpan finds the period that holds t by walking: back an hour at a time
// until the label changes, then forward a minute at a time to the first
// instant with t's label; the same forward for the end. Zone changes since
// 1970 fall on whole minutes.
func refSpan(t time.Time, c sluice.Calendar) (start, end time.Time) {
	lab := refLabel(t, c)
	s := t.Truncate(time.Minute)
	for refLabel(s, c) == lab {
		s = s.Add(-time.Hour)
	}
	for refLabel(s, c) != lab {
		s = s.Add(time.Minute)
	}
	e := t.Truncate(time.Minute).Add(time.Minute)
	for refLabel(e, c) == lab {
		e = e.Add(time.Hour)
	}
	for refLabel(e.Add(-time.Minute), c) != lab {
		e = e.Add(-time.Minute)
	}
	return s, e
}

var refZones = []string{"UTC", "America/Los_Angeles", "America/Santiago", "America/Havana",
	"Australia/Lord_Howe", "Asia/Kathmandu", "Pacific/Apia", "Pacific/Chatham", "Asia/Tehran",
	"Europe/London", "America/St_Johns", "Pacific/Kiritimati"}

// TestCalendarSpanProperty compares Span with the reference on random
// instants in zones with every kind of clock change (30-minute DST, offsets
// of :45, a day skipped by Apia in 2011, clocks changed at midnight), the
// instants drawn near those changes half of the time.
func TestCalendarSpanProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		loc, err := time.LoadLocation(refZones[rng.IntN(len(refZones))])
		if err != nil {
			t.Fatal(err)
		}
		c := sluice.Calendar{Unit: driver.CalendarUnit(1 + rng.IntN(3)), Zone: loc}
		if c.Unit == sluice.Month {
			c.RenewalDay = 1 + rng.IntN(31)
		}
		at := time.Unix(946684800+rng.Int64N(40*365*86400), rng.Int64N(1e9))
		if rng.IntN(2) == 0 {
			// Near a clock change of this zone, or the day Apia skipped.
			if _, end := at.ZoneBounds(); !end.IsZero() {
				at = end.Add(time.Duration(rng.Int64N(int64(72*time.Hour))) - 36*time.Hour)
			}
			if loc.String() == "Pacific/Apia" && rng.IntN(3) == 0 {
				at = time.Date(2011, 12, 29, 12, 0, 0, 0, time.UTC).Add(time.Duration(rng.Int64N(int64(72 * time.Hour))))
			}
		}
		s, e := c.Span(at)
		rs, re := refSpan(at, c)
		if !s.Equal(rs) || !e.Equal(re) {
			t.Fatalf("case %d: %v at %v: Span = [%v, %v), reference [%v, %v)", i, c, at.In(loc), s.In(loc), e.In(loc), rs.In(loc), re.In(loc))
		}
		if at.Before(s) || !at.Before(e) {
			t.Fatalf("case %d: %v at %v outside its span [%v, %v)", i, c, at, s, e)
		}
		r, err := sluice.FixedWindow{Limit: 1, Calendar: c}.Rule()
		if err != nil {
			t.Fatal(err)
		}
		if life := e.Sub(s) + driver.KeyTTLMargin; life > r.TTL() {
			t.Fatalf("case %d: a period of %v is longer than the TTL bound %v", i, e.Sub(s), r.TTL())
		}
		b := luascript.CalendarBounds(&r, at)
		if b[1] != s.UnixMicro() || b[2] != e.UnixMicro() {
			t.Fatalf("case %d: bounds %v do not hold the span [%d, %d)", i, b, s.UnixMicro(), e.UnixMicro())
		}
		if ps, _ := c.Span(s.Add(-time.Nanosecond)); b[0] != ps.UnixMicro() {
			t.Fatalf("case %d: bounds %v: previous period starts at %d", i, b, ps.UnixMicro())
		}
		if _, ne := c.Span(e); b[3] != ne.UnixMicro() {
			t.Fatalf("case %d: bounds %v: next period ends at %d", i, b, ne.UnixMicro())
		}
	}
}

// TestCalendarCases checks the hand-written periods of the conformance
// suite against Span and the reference: the zone file's (refSpan of
// tzZone) where the zone has transitions, else the walking one (which
// takes a period for the instants that share its label, and so cannot
// place an hour a clock change reads as the previous day again).
func TestCalendarCases(t *testing.T) {
	zones := tzifZones(t)
	for _, c := range sluicetest.CalendarCases {
		at, start, end := c.Times(t)
		cal := c.Policy(t, 1).Calendar
		s, e := cal.Span(at)
		rs, re := refSpan(at, cal)
		if z, ok := zones[c.Zone]; ok {
			// Not where a rule of the file's footer continues the zone.
			if ns, ne, ok := z.refSpan(cal.Unit, int64(cal.RenewalDay), at.UnixNano()); ok {
				rs, re = time.Unix(0, ns), time.Unix(0, ne)
			}
		}
		if !s.Equal(start) || !e.Equal(end) || !rs.Equal(start) || !re.Equal(end) {
			t.Errorf("%s: Span [%v, %v), reference [%v, %v), want [%v, %v)", c.Name, s, e, rs, re, start, end)
		}
	}
}

func TestCalendarInvalid(t *testing.T) {
	la, _ := time.LoadLocation("America/Los_Angeles")
	for _, tc := range []struct {
		p    sluice.FixedWindow
		want string
	}{
		{sluice.FixedWindow{Limit: 1, Calendar: sluice.Calendar{Unit: sluice.Month, Zone: la}}, "RenewalDay must be 1 to 31"},
		{sluice.FixedWindow{Limit: 1, Calendar: sluice.Calendar{Unit: sluice.Month, Zone: la, RenewalDay: 32}}, "RenewalDay must be 1 to 31"},
		{sluice.FixedWindow{Limit: 1, Calendar: sluice.Calendar{Unit: sluice.Day, Zone: la, RenewalDay: 3}}, "RenewalDay is only for monthly"},
		{sluice.FixedWindow{Limit: 1, Calendar: sluice.Calendar{Unit: sluice.Day}}, "Zone must be set"},
		{sluice.FixedWindow{Limit: 1, Calendar: sluice.Calendar{Zone: la}}, "Unit must be Day, Week or Month"},
		{sluice.FixedWindow{Limit: 1, Window: time.Hour, Calendar: sluice.Calendar{Unit: sluice.Day, Zone: la}}, "a Window or a Calendar"},
	} {
		_, err := tc.p.Rule()
		if !errors.Is(err, sluice.ErrInvalidPolicy) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.p, err, tc.want)
		}
	}
	if err := driver.AlgorithmGCRA.Takes(driver.Params{Limit: 1, Rate: 1, Per: time.Second, Calendar: sluice.Calendar{Unit: sluice.Day, Zone: la}}); err == nil {
		t.Error("GCRA with a Calendar accepted")
	}
	if _, err := driver.ParseCalendarUnit("fortnight"); !errors.Is(err, sluice.ErrInvalidPolicy) {
		t.Errorf("ParseCalendarUnit(fortnight) = %v", err)
	}
}

func TestCalendarRule(t *testing.T) {
	la, _ := time.LoadLocation("America/Los_Angeles")
	r, err := sluice.FixedWindow{Limit: 10000, Calendar: sluice.Calendar{Unit: sluice.Day, Zone: la}}.Rule()
	if err != nil {
		t.Fatal(err)
	}
	if got := sluice.DefaultName(r); got != "fw-10000-day-America.Los_Angeles" {
		t.Errorf("DefaultName = %q", got)
	}
	if r.State() == (sluice.Rule{Algorithm: driver.AlgorithmFixedWindow}).State() {
		t.Error("calendar and duration windows share a state name")
	}
	if r.Period() != 24*time.Hour {
		t.Errorf("Period = %v", r.Period())
	}
	m, _ := sluice.FixedWindow{Limit: 5, Calendar: sluice.Calendar{Unit: sluice.Month, Zone: time.UTC, RenewalDay: 31}}.Rule()
	if got := sluice.DefaultName(m); got != "fw-5-month31-UTC" {
		t.Errorf("DefaultName = %q", got)
	}
	if got := m.String(); got != "fixed_window(limit=5, period=month from day 31 in UTC)" {
		t.Errorf("String = %q", got)
	}
}

// TestCalendarPlans: a plan of a calendar quota may load its zone again;
// another zone or period is refused.
func TestCalendarPlans(t *testing.T) {
	la1, _ := time.LoadLocation("America/Los_Angeles")
	la2, _ := time.LoadLocation("America/Los_Angeles")
	ny, _ := time.LoadLocation("America/New_York")
	base := sluice.FixedWindow{Limit: 5, Calendar: sluice.Calendar{Unit: sluice.Day, Zone: la1}}
	store := memstore.New()
	if _, err := sluice.New(store, base, sluice.WithPlan("pro", sluice.FixedWindow{Limit: 9, Calendar: sluice.Calendar{Unit: sluice.Day, Zone: la2}})); err != nil {
		t.Errorf("the same zone loaded twice: %v", err)
	}
	for _, c := range []sluice.Calendar{{Unit: sluice.Day, Zone: ny}, {Unit: sluice.Week, Zone: la2}} {
		if _, err := sluice.New(store, base, sluice.WithPlan("pro", sluice.FixedWindow{Limit: 9, Calendar: c})); !errors.Is(err, sluice.ErrInvalidPolicy) {
			t.Errorf("a plan of %v: %v, want ErrInvalidPolicy", c, err)
		}
	}
}
