package sluice

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// calendarName is the default limiter name of a FixedWindow with calendar
// periods, such as "fw-1000-day-America.Los_Angeles" or
// "fw-50-month31-Europe.Paris": the zone's '/' becomes '.' and '+' becomes
// 'p'; a name over 64 characters ends with a hash of the zone instead.
func calendarName(short string, limit int64, c Calendar) string {
	head := short + "-" + strconv.FormatInt(limit, 10) + "-" + c.Unit.String()
	if c.Unit == Month {
		head += strconv.Itoa(c.RenewalDay)
	}
	zone := []byte(c.Zone.String())
	for i, b := range zone {
		switch {
		case b == '/':
			zone[i] = '.'
		case b == '+':
			zone[i] = 'p'
		case !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '.' || b == '-'):
			zone[i] = '_'
		}
	}
	if name := head + "-" + string(zone); len(name) <= MaxNameLength {
		return name
	}
	sum := sha256.Sum256([]byte(c.Zone.String()))
	return head + "-" + hex.EncodeToString(sum[:8])
}
