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
	"math"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
)

// The scripts, one per algorithm: prelude.lua, the algorithm's decide
// function (scripts/<algorithm>.lua) and the driver batch.lua, which decides
// any number of keys in one call: KEYS[i] with ArgsPerKey ARGV each (Args),
// and replies with one string of a record per key (DecodeCall).
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

// ArgsPerKey is the number of ARGV of each key (see batch.lua).
const ArgsPerKey = 8

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

// RecordSize is the length in bytes of one decision's record in a call's
// reply (see batch.lua): allowed and the override's status, one byte
// each, then remaining, retry after and reset after in microseconds, the
// receipt and the override's limit, each a little-endian int64.
const RecordSize = 2 + 5*8

// DecodeCall reads the reply of a call that decided n keys, one string
// of n records (see batch.lua), and passes each decision's Result and
// receipt to set, in order, or its error when its record is out of range
// (ErrReply, or sluice.ErrClockSkew for a calendar decision whose clock is
// outside its periods). It returns an ErrReply, and calls set for none,
// when the reply does not hold n records.
func DecodeCall(reply string, n int, set func(j int, res sluice.Result, receipt int64, err error)) error {
	if len(reply) != n*RecordSize {
		return fmt.Errorf("%w: %d bytes, want %d for %d decisions", ErrReply, len(reply), n*RecordSize, n)
	}
	for j := range n {
		res, receipt, err := decodeRecord(reply[j*RecordSize : (j+1)*RecordSize])
		set(j, res, receipt, err)
	}
	return nil
}

// decodeRecord turns one decision's record (allowed, the override's
// status, remaining, retry after and reset after in microseconds, receipt,
// the override's limit) into its Result and receipt.
func decodeRecord(r string) (sluice.Result, int64, error) {
	allowed, status := r[0], r[1]
	remaining, retry, reset := int64At(r, 2), int64At(r, 10), int64At(r, 18)
	receipt, ovLimit := int64At(r, 26), int64At(r, 34)
	if allowed == clockSkew {
		return sluice.Result{}, 0, sluice.ErrClockSkew
	}
	if allowed > 1 || remaining < 0 || retry < 0 || retry > maxMicros || reset < 0 || reset > maxMicros || receipt <= 0 ||
		status > 2 || (status == 1) != (ovLimit > 0) {
		return sluice.Result{}, 0, fmt.Errorf("%w: allowed %d, override status %d, remaining %d, retry after %dµs, reset after %dµs, receipt %d, override limit %d",
			ErrReply, allowed, status, remaining, retry, reset, receipt, ovLimit)
	}
	res := sluice.Result{
		Allowed:         allowed == 1,
		Remaining:       remaining,
		RetryAfter:      time.Duration(retry) * time.Microsecond,
		ResetAfter:      time.Duration(reset) * time.Microsecond,
		OverrideInvalid: status == 2,
	}
	if status == 1 {
		res.Source, res.Limit = sluice.SourceOverride, ovLimit
	}
	return res, receipt, nil
}

// maxMicros is the longest time.Duration in microseconds.
const maxMicros = math.MaxInt64 / int64(time.Microsecond)

// int64At is the little-endian int64 at s[i:i+8].
func int64At(s string, i int) int64 {
	s = s[i : i+8]
	return int64(uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56)
}
