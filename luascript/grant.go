package luascript

import (
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// Grants (driver.Granter): one call of grant.lua, after prelude.lua, per
// GrantOp: its grant key and, when it names one, its plain key, in one
// slot.

//go:embed scripts/grant.lua
var grantLua string

// Grant is the script of a grant call.
var Grant = sum(preludeLua + grantLua)

// GrantKeys returns the keys of op's call.
func GrantKeys(op *driver.GrantOp) []string {
	if op.Plain != "" {
		return []string{op.Key, op.Plain}
	}
	return []string{op.Key}
}

// GrantArgs returns the arguments of op's call (see grant.lua); clock is
// the time the calendar bounds are computed around when the server's TIME
// decides.
func GrantArgs(op *driver.GrantOp, clock time.Time) []string {
	var now int64
	t := clock
	if !op.Now.IsZero() {
		now, t = op.Now.UnixMicro(), op.Now
	}
	kind := 1
	if !op.Rule.Algorithm.Rated() {
		kind = 2
		if !op.Rule.Calendar.IsZero() {
			kind = 3
		}
	}
	flags := 0
	if op.Return {
		flags |= 1
	}
	if op.Reset {
		flags |= 2
	}
	i := strconv.FormatInt
	args := []string{i(now, 10), strconv.Itoa(kind), i(op.Rule.Limit, 10), i(op.Rule.Param(), 10), op.Holder.String(),
		i(op.Unspent, 10), i(op.Want, 10), i(op.Need, 10), strconv.Itoa(flags), i(op.Life.Microseconds(), 10)}
	if kind == 3 {
		for _, b := range CalendarBounds(&op.Rule, t) {
			args = append(args, i(b, 10))
		}
	}
	return args
}

// DecodeGrant reads a grant call's reply: seven integers.
func DecodeGrant(op *driver.GrantOp, v []int64) (driver.GrantResult, error) {
	if len(v) != 7 {
		return driver.GrantResult{}, fmt.Errorf("%w: grant reply of %d integers, want 7", ErrReply, len(v))
	}
	x, held, left, holders, more, level, mixed := v[0], v[1], v[2], v[3], v[4], v[5], v[6]
	if x < 0 || x > held || held > op.Rule.Limit || left < 0 || left > op.Life.Microseconds() || holders < 1 ||
		more < 0 || more > maxMicros || level < 0 || level > op.Rule.Limit || mixed < 0 || mixed > 1 {
		return driver.GrantResult{}, fmt.Errorf("%w: grant reply %v out of range", ErrReply, v)
	}
	return driver.GrantResult{Granted: x, Held: held, Left: time.Duration(left) * time.Microsecond, Holders: holders,
		More: time.Duration(more) * time.Microsecond, Level: level, Mixed: mixed == 1}, nil
}
