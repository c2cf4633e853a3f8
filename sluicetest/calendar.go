package sluicetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// A CalendarCase is one calendar period checked by RunCalendar: the period
// of Calendar that holds At runs from Start to End, both written out by
// hand (the reference), so a day of 23 or 25 hours, a skipped or repeated
// midnight and a clamped renewal day are each checked against the instant
// a person would give.
type CalendarCase struct {
	Name       string
	Zone       string
	Unit       driver.CalendarUnit
	RenewalDay int
	At         string // RFC 3339
	Start, End string // RFC 3339, with the zone's offsets
}

// CalendarCases are the periods RunCalendar checks: DST days in
// America/Los_Angeles, zones whose clocks change at midnight
// (America/Santiago, America/Havana), ISO weeks across a year's end, month
// ends, leap years and renewal on the 31st; and two clock changes of the
// past across midnight: Antarctica/Casey's three hours back from 02:00 in
// 2010 (the day starts at the first of two midnights and lasts 27 hours)
// and America/Goose_Bay's 00:01 back to 23:01 (the hour that reads the
// previous day again belongs to the day that began at midnight). Their
// instants lie where no later zone database changes the rules.
var CalendarCases = []CalendarCase{
	{"LA spring-forward day (23h)", "America/Los_Angeles", sluice.Day, 0, "2024-03-10T12:00:00-07:00", "2024-03-10T00:00:00-08:00", "2024-03-11T00:00:00-07:00"},
	{"LA fall-back day (25h)", "America/Los_Angeles", sluice.Day, 0, "2024-11-03T01:30:00-08:00", "2024-11-03T00:00:00-07:00", "2024-11-04T00:00:00-08:00"},
	{"LA ordinary day", "America/Los_Angeles", sluice.Day, 0, "2024-07-04T23:59:59-07:00", "2024-07-04T00:00:00-07:00", "2024-07-05T00:00:00-07:00"},
	{"Santiago midnight skipped (day starts 01:00)", "America/Santiago", sluice.Day, 0, "2024-09-08T10:00:00-03:00", "2024-09-08T01:00:00-03:00", "2024-09-09T00:00:00-03:00"},
	{"Santiago day before midnight repeated (25h)", "America/Santiago", sluice.Day, 0, "2024-04-06T23:30:00-04:00", "2024-04-06T00:00:00-03:00", "2024-04-07T00:00:00-04:00"},
	{"Havana midnight skipped", "America/Havana", sluice.Day, 0, "2024-03-10T05:00:00-04:00", "2024-03-10T01:00:00-04:00", "2024-03-11T00:00:00-04:00"},
	{"Havana midnight repeated (starts at the first)", "America/Havana", sluice.Day, 0, "2024-11-03T00:30:00-05:00", "2024-11-03T00:00:00-04:00", "2024-11-04T00:00:00-05:00"},
	{"ISO week across the year's end", "Europe/Paris", sluice.Week, 0, "2025-01-01T08:00:00+01:00", "2024-12-30T00:00:00+01:00", "2025-01-06T00:00:00+01:00"},
	{"ISO week with LA's spring-forward (167h)", "America/Los_Angeles", sluice.Week, 0, "2024-03-10T08:00:00-07:00", "2024-03-04T00:00:00-08:00", "2024-03-11T00:00:00-07:00"},
	{"month from the 1st, LA, spring-forward inside", "America/Los_Angeles", sluice.Month, 1, "2024-03-31T23:59:00-07:00", "2024-03-01T00:00:00-08:00", "2024-04-01T00:00:00-07:00"},
	{"renewal on the 31st: leap February", "UTC", sluice.Month, 31, "2024-02-15T00:00:00Z", "2024-01-31T00:00:00Z", "2024-02-29T00:00:00Z"},
	{"renewal on the 31st: from February 29th", "UTC", sluice.Month, 31, "2024-03-30T23:00:00Z", "2024-02-29T00:00:00Z", "2024-03-31T00:00:00Z"},
	{"renewal on the 31st: common February", "UTC", sluice.Month, 31, "2023-02-28T00:00:00Z", "2023-02-28T00:00:00Z", "2023-03-31T00:00:00Z"},
	{"renewal on the 31st: April has 30 days", "Asia/Tokyo", sluice.Month, 31, "2024-04-30T09:00:00+09:00", "2024-04-30T00:00:00+09:00", "2024-05-31T00:00:00+09:00"},
	{"renewal on the 30th: leap February", "UTC", sluice.Month, 30, "2024-03-01T00:00:00Z", "2024-02-29T00:00:00Z", "2024-03-30T00:00:00Z"},
	{"Casey day before three hours back (24h)", "Antarctica/Casey", sluice.Day, 0, "2010-03-04T12:00:00+11:00", "2010-03-04T00:00:00+11:00", "2010-03-05T00:00:00+11:00"},
	{"Casey three hours back across midnight (27h)", "Antarctica/Casey", sluice.Day, 0, "2010-03-05T12:00:00+08:00", "2010-03-05T00:00:00+11:00", "2010-03-06T00:00:00+08:00"},
	{"Goose Bay 00:01 back to 23:01 (the hour read twice)", "America/Goose_Bay", sluice.Day, 0, "2010-11-06T23:30:00-04:00", "2010-11-07T00:00:00-03:00", "2010-11-08T00:00:00-04:00"},
	{"renewal on the 15th, before it", "Australia/Sydney", sluice.Month, 15, "2024-01-14T23:59:59+11:00", "2023-12-15T00:00:00+11:00", "2024-01-15T00:00:00+11:00"},
}

// Policy returns the FixedWindow of limit per period of c.
func (c CalendarCase) Policy(t testing.TB, limit int64) sluice.FixedWindow {
	t.Helper()
	loc, err := time.LoadLocation(c.Zone)
	if err != nil {
		t.Fatalf("%s: %v (the zone database is embedded by importing time/tzdata)", c.Name, err)
	}
	return sluice.FixedWindow{Limit: limit, Calendar: sluice.Calendar{Unit: c.Unit, Zone: loc, RenewalDay: c.RenewalDay}}
}

// Times returns At, Start and End.
func (c CalendarCase) Times(t testing.TB) (at, start, end time.Time) {
	t.Helper()
	var ts [3]time.Time
	for i, s := range []string{c.At, c.Start, c.End} {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		ts[i] = v
	}
	return ts[0], ts[1], ts[2]
}

// checkPeriodTTL checks, when the harness can read TTLs, that key
// expires at its period's end (left from now, rounded up to the
// millisecond) plus the margin.
func checkPeriodTTL(t *testing.T, h Harness, key string, left time.Duration) {
	ttl, ok := h.keyTTL(t, key)
	if !ok {
		return
	}
	want := left.Truncate(time.Millisecond) + driver.KeyTTLMargin
	if left%time.Millisecond != 0 {
		want += time.Millisecond
	}
	// Valkey's PTTL counts down in real time meanwhile.
	if ttl > want || ttl < want-5*time.Second {
		t.Errorf("key TTL %v, want the period's end plus the margin, %v", ttl, want)
	}
}

// RunCalendar runs a timeline per CalendarCase under a fake clock: the
// last instant of the previous period, requests within the period (refused
// once the limit is taken, RetryAfter and ResetAfter the real period end),
// a refund, the last microsecond of the period and the first of the next;
// keys expire at the period's end plus the margin.
func RunCalendar(t *testing.T, h Harness) {
	for _, c := range CalendarCases {
		t.Run(c.Name, func(t *testing.T) {
			at, start, end := c.Times(t)
			clock := NewClockAt(start.Add(-time.Microsecond))
			p := c.Policy(t, 2)
			l := h.NewLimiter(t, p, sluice.WithClock(clock.Now))
			ctx := context.Background()
			step := func(what string, n int64, want sluice.Result) sluice.Result {
				t.Helper()
				res, err := l.AllowN(ctx, "k", n)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				want.Limit = 2
				if res != want {
					t.Fatalf("%s at %v:\n got %+v\nwant %+v", what, clock.Now(), res, want)
				}
				return res
			}
			// The last microsecond of the previous period.
			step("previous period", 1, sluice.Result{Allowed: true, Remaining: 1, ResetAfter: time.Microsecond})
			clock.Set(at.Sub(Epoch))
			left := end.Sub(at)
			step("first of the period", 1, sluice.Result{Allowed: true, Remaining: 1, ResetAfter: left})
			step("second", 1, sluice.Result{Allowed: true, Remaining: 0, ResetAfter: left})
			step("over the limit", 1, sluice.Result{RetryAfter: left, ResetAfter: left})
			// Refund a take of the previous period: nothing comes back.
			refund(t, h, l, clock.Now(), start.Add(-time.Microsecond).UnixMicro(), driver.Result{Allowed: true, ResetAfter: left})
			// Refund one of this period's takes.
			refund(t, h, l, clock.Now(), at.UnixMicro(), driver.Result{Allowed: true, Remaining: 1, ResetAfter: left})
			step("after the refund", 1, sluice.Result{Allowed: true, Remaining: 0, ResetAfter: left})
			checkPeriodTTL(t, h, storeKey(l, "k"), left)
			clock.Set(end.Add(-time.Microsecond).Sub(Epoch))
			step("last microsecond", 1, sluice.Result{RetryAfter: time.Microsecond, ResetAfter: time.Microsecond})
			clock.Set(end.Sub(Epoch))
			res, err := l.Allow(ctx, "k")
			if err != nil || !res.Allowed || res.Remaining != 1 {
				t.Fatalf("first instant of the next period: %+v, %v", res, err)
			}
			_, nextEnd := l.Rule().Span(end)
			if res.ResetAfter != nextEnd.Sub(end) {
				t.Fatalf("next period: ResetAfter %v, want %v", res.ResetAfter, nextEnd.Sub(end))
			}
		})
	}
}

// refund gives back one unit of the take whose receipt is receipt, at now.
func refund(t *testing.T, h Harness, l *sluice.Limiter, now time.Time, receipt int64, want driver.Result) {
	t.Helper()
	ops := []driver.Op{{Key: storeKey(l, "k"), Rule: l.Rule(), Cost: -1, Receipt: receipt, Now: now}}
	if err := h.Store.Do(context.Background(), ops); err != nil || ops[0].Err != nil {
		t.Fatalf("refund: %v %v", err, ops[0].Err)
	}
	if ops[0].Result != want {
		t.Fatalf("refund of receipt %d:\n got %+v\nwant %+v", receipt, ops[0].Result, want)
	}
}

// keyTTL returns the time to live of one key, when the harness can tell.
func (h Harness) keyTTL(t testing.TB, key string) (time.Duration, bool) {
	if h.TTLs == nil {
		return 0, false
	}
	ttl, ok := h.TTLs(t, key)[key]
	return ttl, ok
}

// RunDifferentialCalendar runs random operations on calendar quotas of
// the conformance suite's zones and periods, at instants drawn around
// their period edges, on memstore and on h.Store: every Result and receipt
// must be identical.
func RunDifferentialCalendar(t *testing.T, h Harness) {
	d := NewDiffer(t, h.Store)
	prefix := Prefix(t)
	rng := rand.New(rand.NewPCG(3, 5))
	for ci, cc := range CalendarCases {
		p := cc.Policy(t, int64(1+rng.IntN(4)))
		p.CountRejected = rng.IntN(2) == 0
		rule, err := p.Rule()
		if err != nil {
			t.Fatal(err)
		}
		_, start, end := cc.Times(t)
		now := start.Add(-time.Hour)
		for i := range 60 {
			key := driver.Key(prefix, fmt.Sprintf("c%d", ci), rule, fmt.Sprint(rng.IntN(2)))
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
				receipt = d.Receipt(key, rng.IntN(8)-1, now)
			}
			d.Step(fmt.Sprintf("%s op %d (%v, cost %d, at %v)", cc.Name, i, rule, cost, now),
				driver.Op{Key: key, Rule: rule, Cost: cost, Now: now, Receipt: receipt})
		}
	}
}
