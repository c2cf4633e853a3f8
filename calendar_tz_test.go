package sluice_test

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// tzZone is a zone as its TZif file states it, read by readTZif below and
// not by the time package: the instants (Unix seconds) at which its offset
// changes, the offset (seconds east of UTC) from each, and the last instant
// to which they are known (after it, a rule in the file's footer that this
// reader does not evaluate; math.MaxInt64 when the footer is a fixed
// offset).
type tzZone struct {
	at   []int64
	off  []int64
	last int64
}

// readTZif reads the 64-bit (version 2 and later) transitions of a TZif
// file (RFC 8536).
func readTZif(data []byte) (tzZone, error) {
	var z tzZone
	counts := func(b []byte) (isut, isstd, leap, timecnt, typecnt, charcnt int, err error) {
		if len(b) < 44 || string(b[:4]) != "TZif" {
			return 0, 0, 0, 0, 0, 0, fmt.Errorf("no TZif header")
		}
		c := make([]int, 6)
		for i := range c {
			c[i] = int(binary.BigEndian.Uint32(b[20+4*i:]))
		}
		return c[0], c[1], c[2], c[3], c[4], c[5], nil
	}
	isut, isstd, leap, timecnt, typecnt, charcnt, err := counts(data)
	if err != nil {
		return z, err
	}
	if data[4] < '2' {
		return z, fmt.Errorf("version 1 TZif")
	}
	b := data[44+timecnt*5+typecnt*6+charcnt+leap*8+isstd+isut:]
	if isut, isstd, leap, timecnt, typecnt, charcnt, err = counts(b); err != nil {
		return z, err
	}
	b = b[44:]
	if leap != 0 {
		return z, fmt.Errorf("leap seconds")
	}
	times, idx, types := b[:timecnt*8], b[timecnt*8:timecnt*9], b[timecnt*9:timecnt*9+typecnt*6]
	for i := range timecnt {
		z.at = append(z.at, int64(binary.BigEndian.Uint64(times[8*i:])))
		z.off = append(z.off, int64(int32(binary.BigEndian.Uint32(types[6*int(idx[i]):]))))
	}
	footer := string(b[timecnt*9+typecnt*6+charcnt+isstd+isut:])
	z.last = 1<<63 - 1
	if strings.Contains(footer, ",") && len(z.at) > 0 {
		z.last = z.at[len(z.at)-1]
	}
	return z, nil
}

// offset returns the zone's offset at Unix second s, and false where the
// file does not say it plainly (before the first transition, or after the
// last when a rule continues).
func (z tzZone) offset(s int64) (int64, bool) {
	if len(z.at) == 0 || s < z.at[0] || s > z.last {
		return 0, false
	}
	i := sort.Search(len(z.at), func(i int) bool { return z.at[i] > s }) - 1
	return z.off[i], true
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// refDay returns the local date of the Unix second s, as days since
// 1970-01-01.
func (z tzZone) refDay(s int64) (int64, bool) {
	off, ok := z.offset(s)
	return floorDiv(s+off, 86400), ok
}

// refStart returns the earliest instant (Unix seconds: every transition
// falls on a whole second) whose local date is day or later: of the
// instants in each stretch of one offset, the first at or after the clock
// reads day's midnight; of those, the earliest.
func (z tzZone) refStart(day int64) (int64, bool) {
	mid := day * 86400
	if _, ok := z.offset(mid - 30*3600); !ok {
		return 0, false
	}
	if _, ok := z.offset(mid + 30*3600); !ok {
		return 0, false
	}
	best := int64(1<<63 - 1)
	i0 := max(0, sort.Search(len(z.at), func(i int) bool { return z.at[i] > mid-30*3600 })-1)
	for i := i0; i < len(z.at) && z.at[i] <= mid+30*3600; i++ {
		from, to := z.at[i], int64(1<<63-1)
		if i+1 < len(z.at) {
			to = z.at[i+1]
		}
		if x := max(from, mid-z.off[i]); x < to && x < best {
			best = x
		}
	}
	return best, true
}

// civilFromDays and daysFromCivil convert between days since 1970-01-01
// and proleptic Gregorian dates (H. Hinnant's algorithms).
func civilFromDays(z int64) (y, m, d int64) {
	z += 719468
	era := floorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y = yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = doy - (153*mp+2)/5 + 1
	m = mp + 3
	if m > 12 {
		m -= 12
	}
	if m <= 2 {
		y++
	}
	return y, m, d
}

func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := floorDiv(y, 400)
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

func monthDays(y, m int64) int64 {
	if m == 12 {
		return daysFromCivil(y+1, 1, 1) - daysFromCivil(y, 12, 1)
	}
	return daysFromCivil(y, m+1, 1) - daysFromCivil(y, m, 1)
}

// refFirst and refAfter are the first day of the period holding day and
// the first day of the period after the one starting on first.
func refFirst(u driver.CalendarUnit, renew, day int64) int64 {
	switch u {
	case sluice.Week:
		return day - (day + 3 - 7*floorDiv(day+3, 7)) // 1970-01-01 was a Thursday: (day+3) mod 7 is days since Monday
	case sluice.Month:
		y, m, d := civilFromDays(day)
		if r := min(renew, monthDays(y, m)); d >= r {
			return daysFromCivil(y, m, r)
		}
		if m--; m == 0 {
			y, m = y-1, 12
		}
		return daysFromCivil(y, m, min(renew, monthDays(y, m)))
	}
	return day
}

func refAfter(u driver.CalendarUnit, renew, first int64) int64 {
	switch u {
	case sluice.Week:
		return first + 7
	case sluice.Month:
		y, m, _ := civilFromDays(first)
		if m++; m == 13 {
			y, m = y+1, 1
		}
		return daysFromCivil(y, m, min(renew, monthDays(y, m)))
	}
	return first + 1
}

// refSpan is the period holding the instant t (Unix nanoseconds): from
// the start of the first day of the period of t's date, moved on for as
// long as t is at or after the next period's start.
func (z tzZone) refSpan(u driver.CalendarUnit, renew int64, t int64) (start, end int64, ok bool) {
	sec := floorDiv(t, 1e9)
	day, ok := z.refDay(sec)
	if !ok {
		return 0, 0, false
	}
	f := refFirst(u, renew, day)
	s, ok1 := z.refStart(f)
	n := refAfter(u, renew, f)
	e, ok2 := z.refStart(n)
	for ok1 && ok2 && t >= e*1e9 {
		s, n = e, refAfter(u, renew, n)
		e, ok2 = z.refStart(n)
	}
	return s * 1e9, e * 1e9, ok1 && ok2
}

// zoneinfoZip opens the zone database that time/tzdata embeds: Go's
// lib/time/zoneinfo.zip.
func zoneinfoZip(t *testing.T) *zip.Reader {
	root := os.Getenv("GOROOT")
	if root == "" {
		out, err := exec.Command("go", "env", "GOROOT").Output()
		if err != nil {
			t.Fatalf("finding GOROOT for lib/time/zoneinfo.zip: %v (run the tests with the go command on PATH)", err)
		}
		root = strings.TrimSpace(string(out))
	}
	data, err := os.ReadFile(filepath.Join(root, "lib", "time", "zoneinfo.zip"))
	if err != nil {
		t.Fatalf("the embedded zone database: %v", err)
	}
	r, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tzifZones reads every zone of the embedded zone database.
func tzifZones(t *testing.T) map[string]tzZone {
	zs := map[string]tzZone{}
	for _, f := range zoneinfoZip(t).File {
		if strings.HasSuffix(f.Name, "/") {
			continue
		}
		data := readZipFile(t, f)
		z, err := readTZif(data)
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		if len(z.at) > 0 {
			zs[f.Name] = z
		}
	}
	return zs
}

func readZipFile(t *testing.T, f *zip.File) []byte {
	rc, err := f.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestCalendarEveryTransition checks Span against the reference (the
// TZif files read above, integer arithmetic) at every transition of every
// zone of the embedded zone database: an instant just before, at and just
// after each, and at the starts of the days around it, in days (every
// transition) and in weeks and months (every seventh). Each period must
// hold the instant and be the reference's, so a day starts at its first
// midnight however far clocks went back across it (Antarctica/Casey, three
// hours in 2010), at the clock change when midnight is skipped, and the
// instants a clock change reads as the previous day again (America/
// Goose_Bay's 00:01 back to 23:01) stay in the period that began at
// midnight.
func TestCalendarEveryTransition(t *testing.T) {
	zr := zoneinfoZip(t)
	zones, checked := 0, 0
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, "/") {
			continue
		}
		data := readZipFile(t, f)
		z, err := readTZif(data)
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		loc, err := time.LoadLocationFromTZData(f.Name, data)
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		zones++
		for i, at := range z.at {
			if at < -9e9 || at > 9e9 { // within Unix nanoseconds' range
				continue
			}
			samples := []int64{at*1e9 - 1, at * 1e9, at*1e9 + 1}
			if d, ok := z.refDay(at); ok {
				for _, dd := range []int64{d - 1, d, d + 1, d + 2} {
					if s, ok := z.refStart(dd); ok {
						samples = append(samples, s*1e9-1, s*1e9)
					}
				}
			}
			units := []driver.CalendarUnit{sluice.Day}
			if i%7 == 0 {
				units = append(units, sluice.Week, sluice.Month)
			}
			for _, u := range units {
				renew := int64(0)
				if u == sluice.Month {
					renew = int64(1 + (i/7)%31)
				}
				c := sluice.Calendar{Unit: u, Zone: loc, RenewalDay: int(renew)}
				for _, ns := range samples {
					rs, re, ok := z.refSpan(u, renew, ns)
					if !ok {
						continue
					}
					tt := time.Unix(0, ns)
					s, e := c.Span(tt)
					if tt.Before(s) || !tt.Before(e) {
						t.Fatalf("%v: %v is outside its period [%v, %v)", c, tt.In(loc), s.In(loc), e.In(loc))
					}
					if s.UnixNano() != rs || e.UnixNano() != re {
						t.Fatalf("%v at %v: Span [%v, %v), reference [%v, %v)", c, tt.In(loc),
							s.In(loc), e.In(loc), time.Unix(0, rs).In(loc), time.Unix(0, re).In(loc))
					}
					checked++
				}
			}
		}
	}
	if zones < 300 || checked < 100000 {
		t.Fatalf("checked only %d instants in %d zones", checked, zones)
	}
	t.Logf("%d instants in %d zones", checked, zones)
}
