// Package luascript holds the Lua scripts that decide on Valkey (and
// Redis), for every store that runs them (valkeystore on valkey-go,
// redisstore on go-redis): their source, their SHA-1 for EVALSHA, and the
// layout of their arguments and replies.
package luascript

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
)

// The scripts, one per algorithm: prelude.lua, the algorithm's decide
// function (scripts/<algorithm>.lua) and the driver batch.lua, which decides
// any number of keys in one call: KEYS[i] with six ARGV each (now, limit,
// parameter, cost, flag, receipt), and replies with five integers per key
// (allowed, remaining, retry after and reset after in microseconds, receipt).
var (
	//go:embed scripts/prelude.lua
	preludeLua string
	//go:embed scripts/batch.lua
	batchLua string
	//go:embed scripts/one.lua
	oneLua string
	//go:embed scripts/cross.lua
	crossLua string
	//go:embed scripts/fixed_window.lua
	fixedWindowLua string
	//go:embed scripts/sliding_log.lua
	slidingLogLua string
	//go:embed scripts/sliding_window.lua
	slidingWindowLua string
	//go:embed scripts/token_bucket.lua
	tokenBucketLua string
	//go:embed scripts/gcra.lua
	gcraLua string
	//go:embed scripts/calendar.lua
	calendarLua string
)

// Script is a Lua script and its SHA-1, for EVALSHA.
type Script struct {
	Src string
	SHA string

	// Cross is the same decisions for keys of several slots of one
	// cluster node, in one call: the script declares the flag
	// allow-cross-slot-keys and takes its keys in ARGV (CrossArgs), since
	// a server refuses declared keys of several slots. Before it writes
	// anything it reads every key, and when the node does not serve one of
	// them it replies an error beginning NOTLOCAL, having changed nothing.
	// Nil on a Cross script.
	Cross *Script
}

// CrossShebang is the first line of a Cross script.
const CrossShebang = "#!lua flags=allow-cross-slot-keys\n"

func newScript(decide string) *Script {
	body := preludeLua + decide + batchLua
	s := sum(body + oneLua)
	s.Cross = sum(CrossShebang + body + crossLua)
	return s
}

func sum(src string) *Script {
	h := sha1.Sum([]byte(src))
	return &Script{Src: src, SHA: hex.EncodeToString(h[:])}
}

// For returns the script of an algorithm, nil for an unknown one.
func For(alg sluice.Algorithm) *Script {
	if int(alg) >= len(scripts) {
		return nil
	}
	return scripts[alg]
}

var scripts = [...]*Script{
	sluice.AlgorithmFixedWindow:   newScript(fixedWindowLua),
	sluice.AlgorithmSlidingLog:    newScript(slidingLogLua),
	sluice.AlgorithmSlidingWindow: newScript(slidingWindowLua),
	sluice.AlgorithmTokenBucket:   newScript(tokenBucketLua),
	sluice.AlgorithmGCRA:          newScript(gcraLua),
}

// calendar decides fixed windows over calendar periods: the fixed
// window's script with calendar.lua's decide.
var calendar = newScript(fixedWindowLua + calendarLua)

// ForRule returns the script that executes r: its algorithm's, or for
// calendar periods the calendar script. nil for an unknown algorithm.
func ForRule(r *sluice.Rule) *Script {
	if r.IsCalendar() {
		return calendar
	}
	return For(r.Algorithm)
}

// CalendarParam is the parameter of a calendar rule's script, in place of
// Args' third: the first instants of four periods around the Op's time, or
// around clock when the server's TIME decides (sluice.Rule.CalendarBounds),
// in microseconds, separated by spaces (see calendar.lua).
func CalendarParam(op *sluice.Op, clock time.Time) string {
	now := op.Now
	if now.IsZero() {
		now = clock
	}
	b := op.Rule.CalendarBounds(now)
	buf := make([]byte, 0, 4*21)
	for i, v := range b {
		if i > 0 {
			buf = append(buf, ' ')
		}
		buf = strconv.AppendInt(buf, v, 10)
	}
	return string(buf)
}

// clockSkew is the "allowed" a calendar script replies when the deciding
// clock is outside the periods sent: Decode returns sluice.ErrClockSkew.
const clockSkew = 2

// ArgsPerKey is the number of ARGV of each key; ReplyPerKey the number of
// integers of the reply for each key (see batch.lua).
const (
	ArgsPerKey  = 8
	ReplyPerKey = 7
)

// Args returns the ARGV of op, in order: now in microseconds (0: the
// server's TIME), limit, the algorithm's parameter, cost, the flag
// (CountRejected: 1), and for a refund (negative cost) the receipt of the
// take it refunds, else 0; then two zeros, for a decision that reads no
// override. A caller that sends op.Override among the call's keys puts
// its index in KEYS (from 1) in the seventh, and OverrideBounds(op) in the
// eighth.
func Args(op *sluice.Op) [ArgsPerKey]int64 {
	var a [ArgsPerKey]int64
	if !op.Now.IsZero() {
		a[0] = op.Now.UnixMicro()
	}
	a[1] = op.Rule.Limit
	a[2] = op.Rule.Param()
	a[3] = op.Cost
	if op.Rule.CountRejected {
		a[4] = 1
	}
	if op.Cost < 0 {
		a[5] = op.Receipt
	}
	return a
}

// OverrideBounds is the eighth argument of a decision that reads an
// override: the bounds an override must keep to apply
// (sluice.Rule.OverrideBounds), separated by spaces.
func OverrideBounds(op *sluice.Op) string {
	b := op.Rule.OverrideBounds()
	buf := make([]byte, 0, 4*21)
	for i, v := range b {
		if i > 0 {
			buf = append(buf, ' ')
		}
		buf = strconv.AppendInt(buf, v, 10)
	}
	return string(buf)
}

// ErrReply is the error of a reply that does not hold what the scripts
// return.
var ErrReply = errors.New("reply out of range")

// Decode turns the reply of one key (allowed, remaining, retry after and
// reset after in microseconds, receipt, the override's limit and status)
// into its Result and receipt.
func Decode(v [ReplyPerKey]int64) (sluice.Result, int64, error) {
	if v[0] == clockSkew {
		return sluice.Result{}, 0, sluice.ErrClockSkew
	}
	if v[0] != 0 && v[0] != 1 || v[1] < 0 || v[2] < 0 || v[3] < 0 || v[4] <= 0 ||
		v[6] < 0 || v[6] > 2 || (v[6] == 1) != (v[5] > 0) {
		return sluice.Result{}, 0, fmt.Errorf("%w: %v", ErrReply, v)
	}
	res := sluice.Result{
		Allowed:         v[0] == 1,
		Remaining:       v[1],
		RetryAfter:      time.Duration(v[2]) * time.Microsecond,
		ResetAfter:      time.Duration(v[3]) * time.Microsecond,
		OverrideInvalid: v[6] == 2,
	}
	if v[6] == 1 {
		res.Source, res.Limit = sluice.SourceOverride, v[5]
	}
	return res, v[4], nil
}
