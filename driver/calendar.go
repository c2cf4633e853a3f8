package driver

import (
	"fmt"
	"time"
)

// CalendarUnit is the length of a calendar period: a civil day, an ISO week
// (Monday to Sunday) or a month.
type CalendarUnit uint8

// The calendar units.
const (
	Day CalendarUnit = iota + 1
	Week
	Month
)

var calendarUnitNames = [...]string{Day: "day", Week: "week", Month: "month"}

// String returns "day", "week" or "month".
func (u CalendarUnit) String() string {
	if int(u) < len(calendarUnitNames) && calendarUnitNames[u] != "" {
		return calendarUnitNames[u]
	}
	return fmt.Sprintf("CalendarUnit(%d)", int(u))
}

// ParseCalendarUnit returns the unit named s: "day", "week" or "month".
func ParseCalendarUnit(s string) (CalendarUnit, error) {
	for u, name := range calendarUnitNames {
		if name != "" && name == s {
			return CalendarUnit(u), nil
		}
	}
	return 0, invalid("unknown calendar period %q (want day, week or month)", s)
}

// Calendar is a period of the civil calendar in a time zone, for a
// FixedWindow whose windows are calendar days, ISO weeks (starting on
// Monday) or months rather than fixed durations. A period starts at the
// first instant of its first day in Zone, so a day lasts 23 or 25 hours on
// the days a zone's clocks change, and a zone whose clocks change at
// midnight starts that day at 01:00 or at the first of two midnights.
//
// A monthly period renews on RenewalDay (1 to 31) of every month, clamped
// to the month's last day: renewing on the 31st renews on February 28th
// (29th in a leap year), April 30th, and so on. RenewalDay is 0 for days
// and weeks.
//
// The zero Calendar (Unit 0) means no calendar: the FixedWindow's Window is
// used instead. Zone must be set (time.UTC for UTC); programs that may run
// without a system zone database should import time/tzdata, as cmd/sluice
// does.
type Calendar struct {
	Unit       CalendarUnit
	Zone       *time.Location
	RenewalDay int
}

// IsZero reports whether c is the zero Calendar: no calendar.
func (c Calendar) IsZero() bool { return c.Unit == 0 && c.Zone == nil && c.RenewalDay == 0 }

// Equal reports whether c and o are the same periods: the same unit,
// renewal day and zone (by name: two loads of one zone are equal).
func (c Calendar) Equal(o Calendar) bool {
	if c.Unit != o.Unit || c.RenewalDay != o.RenewalDay || (c.Zone == nil) != (o.Zone == nil) {
		return false
	}
	return c.Zone == nil || c.Zone == o.Zone || c.Zone.String() == o.Zone.String()
}

// Validate reports whether c is a calendar period a limiter can enforce.
func (c Calendar) Validate() error {
	if c.Unit < Day || c.Unit > Month {
		return invalidField("Calendar.Unit", "Calendar.Unit must be Day, Week or Month, got %v", c.Unit)
	}
	if c.Zone == nil {
		return invalidField("Calendar.Zone", "Calendar.Zone must be set (time.UTC for UTC)")
	}
	if c.Unit == Month {
		if c.RenewalDay < 1 || c.RenewalDay > 31 {
			return invalidField("Calendar.RenewalDay", "Calendar.RenewalDay must be 1 to 31 for a monthly period, got %d", c.RenewalDay)
		}
	} else if c.RenewalDay != 0 {
		return invalidField("Calendar.RenewalDay", "Calendar.RenewalDay is only for monthly periods, not a %v", c.Unit)
	}
	return nil
}

// String describes c, such as "month from the 31st in Europe/Paris".
func (c Calendar) String() string {
	zone := "<nil>"
	if c.Zone != nil {
		zone = c.Zone.String()
	}
	if c.Unit == Month {
		return fmt.Sprintf("month from day %d in %s", c.RenewalDay, zone)
	}
	return c.Unit.String() + " in " + zone
}

// nominal is the length a period of c is shown as: 24 hours, 7 days or 31
// days (the longest month); the real period may differ by a clock change.
func (c Calendar) nominal() time.Duration {
	switch c.Unit {
	case Week:
		return 7 * 24 * time.Hour
	case Month:
		return 31 * 24 * time.Hour
	}
	return 24 * time.Hour
}

// longest bounds the length of any period of c, with room for the largest
// change of a zone's offset the zone database holds (a day skipped or
// repeated when a zone crossed the date line).
func (c Calendar) longest() time.Duration { return c.nominal() + 48*time.Hour }

// civil is a date of the proleptic Gregorian calendar.
type civil struct {
	y int
	m time.Month
	d int
}

// norm normalizes a date whose day or month may be out of range, as
// time.Date does (January 32nd is February 1st).
func norm(y int, m time.Month, d int) civil {
	y, m, d = time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Date()
	return civil{y, m, d}
}

func daysIn(y int, m time.Month) int { return time.Date(y, m+1, 0, 12, 0, 0, 0, time.UTC).Day() }

// first is the first day of the period of c that holds the date t.
func (c Calendar) first(t civil) civil {
	switch c.Unit {
	case Week:
		wd := int(time.Date(t.y, t.m, t.d, 12, 0, 0, 0, time.UTC).Weekday())
		return norm(t.y, t.m, t.d-(wd+6)%7) // ISO: Monday starts the week
	case Month:
		if r := min(c.RenewalDay, daysIn(t.y, t.m)); t.d >= r {
			return civil{t.y, t.m, r}
		}
		p := norm(t.y, t.m-1, 1)
		return civil{p.y, p.m, min(c.RenewalDay, daysIn(p.y, p.m))}
	}
	return t
}

// after is the first day of the period after the one that starts on p (a
// first day).
func (c Calendar) after(p civil) civil {
	switch c.Unit {
	case Week:
		return norm(p.y, p.m, p.d+7)
	case Month:
		n := norm(p.y, p.m+1, 1)
		return civil{n.y, n.m, min(c.RenewalDay, daysIn(n.y, n.m))}
	}
	return norm(p.y, p.m, p.d+1)
}

// maxZoneOffset bounds how far any zone's clocks are from UTC: the zone
// database's widest offsets are under 16 hours (local mean times of the
// 19th century), and today's lie within -12 and +14 hours.
const maxZoneOffset = 36 * time.Hour

// start returns the first instant of the date d in c.Zone: the earliest
// instant whose date in c.Zone is d or later. That is midnight on an
// ordinary day; the first of two midnights when clocks went back across
// midnight, by however much; the clock change itself when midnight was
// skipped; and, for a date a zone skipped (Apia's December 30th, 2011), the
// first instant of the day after, so that the skipped day's period is
// empty.
//
// It walks the zone's periods (time.Time.ZoneBounds: each has one offset,
// so the clock moves with real time inside it) from an instant no zone
// reads as d, and in the first period that reaches d returns where it does.
// Usually one period holds the whole search.
func (c Calendar) start(d civil) time.Time {
	// mid is d's midnight as a clock reading: at offset off, the clock
	// reads mid at mid-off.
	mid := time.Date(d.y, d.m, d.d, 0, 0, 0, 0, time.UTC)
	t := mid.Add(-maxZoneOffset).In(c.Zone)
	for {
		_, end := t.ZoneBounds()
		_, off := t.Zone()
		at := mid.Add(-time.Duration(off) * time.Second).In(c.Zone)
		if at.Before(t) {
			at = t // the clock already reads d or later when this period begins
		}
		if end.IsZero() || at.Before(end) {
			return at
		}
		t = end
	}
}

// Span returns the period of c that holds t: its first instant and the
// first instant of the next period. Periods follow one another without
// gaps or overlap, each from the start of its first day: where clocks went
// back across midnight, the instants that read the previous day again
// (00:01 back to 23:01) belong to the period that began at the first
// midnight.
func (c Calendar) Span(t time.Time) (start, end time.Time) {
	y, m, d := t.In(c.Zone).Date()
	f := c.first(civil{y, m, d})
	start = c.start(f)
	n := c.after(f)
	end = c.start(n)
	// t's date is f or later, so t is not before start; but t may read a
	// date again after the next period began.
	for !t.Before(end) {
		start, n = end, c.after(n)
		end = c.start(n)
	}
	return start, end
}
