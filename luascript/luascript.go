// Package luascript holds the Lua scripts that decide on Valkey (and
// Redis), for every store that runs them (valkeystore on valkey-go,
// redisstore on go-redis): their source, their SHA-1 for EVALSHA, and the
// layout of their arguments and replies.
package luascript

import (
	"crypto/sha1"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// The pieces of the scripts. A script is assembled (assemble) from
// prelude.lua, one algorithm, the driver batch.lua, which decides any
// number of keys in one call: KEYS[i] and one string of a record per key
// (AppendArgs), and replies with one string of a record per key
// (DecodeCall), and an ending, one.lua or cross.lua.
var (
	//go:embed scripts/prelude.lua
	preludeLua string
	//go:embed scripts/penalty.lua
	penaltyLua string
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
	//go:embed scripts/inflight.lua
	inFlightLua string
)

// An algorithm is one algorithm file: the body of a function that returns
// the algorithm's table, whose fields the assembly binds to the locals
// batch.lua and the endings call: decide (a function deciding one key),
// flush (a function writing what decide kept for the end of the call) and
// readsFirst (true when decide only reads and flush writes; see
// cross.lua). The function is given, in ..., the tables of the algorithms
// in uses, in order (calendar.lua builds on the fixed window's). Its own
// locals are its own: no file sees, shadows or reassigns another's.
type algorithm struct {
	name string // the local the assembly binds its table to
	src  string
	uses []*algorithm
}

// provides are the fields of an algorithm's table that the assembly binds.
var provides = []string{"decide", "flush", "readsFirst"}

var (
	fixedWindowAlg   = &algorithm{name: "fixedWindow", src: fixedWindowLua}
	slidingLogAlg    = &algorithm{name: "slidingLog", src: slidingLogLua}
	slidingWindowAlg = &algorithm{name: "slidingWindow", src: slidingWindowLua}
	tokenBucketAlg   = &algorithm{name: "tokenBucket", src: tokenBucketLua}
	gcraAlg          = &algorithm{name: "gcra", src: gcraLua}
	calendarAlg      = &algorithm{name: "calendar", src: calendarLua, uses: []*algorithm{fixedWindowAlg}}
	inFlightAlg      = &algorithm{name: "inFlight", src: inFlightLua}
)

// A piece is a part of an assembled script: the top-level locals of one
// piece are never redeclared or assigned by another (TestAssembly).
type piece struct {
	name, src string
}

// pieces returns the pieces of the script of a, in order, ending with
// ending (oneLua or crossLua): prelude.lua; penalty.lua; each algorithm a uses, then a,
// each as "local <name> = (function(...) <file> end)(<uses>)"; the
// binding of a's table to the locals decide, flush and readsFirst;
// batch.lua; the ending.
func pieces(a *algorithm, ending string) []piece {
	ps := []piece{{"prelude.lua", preludeLua}, {"penalty.lua", penaltyLua}}
	seen := map[*algorithm]bool{}
	var add func(a *algorithm)
	add = func(a *algorithm) {
		if seen[a] {
			return
		}
		seen[a] = true
		var args []string
		for _, u := range a.uses {
			add(u)
			args = append(args, u.name)
		}
		ps = append(ps, piece{a.name, "local " + a.name + " = (function(...)\n" + a.src + "end)(" + strings.Join(args, ", ") + ")\n"})
	}
	add(a)
	var bind, from []string
	for _, f := range provides {
		bind = append(bind, f)
		from = append(from, a.name+"."+f)
	}
	ps = append(ps, piece{"binding", "local " + strings.Join(bind, ", ") + " = " + strings.Join(from, ", ") + "\n"})
	return append(ps, piece{"batch.lua", batchLua}, piece{"ending", ending})
}

func assemble(a *algorithm, ending string) string {
	var b strings.Builder
	for _, p := range pieces(a, ending) {
		b.WriteString(p.src)
	}
	return b.String()
}

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

func newScript(a *algorithm) *Script {
	s := sum(assemble(a, oneLua))
	s.Cross = sum(CrossShebang + assemble(a, crossLua))
	return s
}

func sum(src string) *Script {
	h := sha1.Sum([]byte(src))
	return &Script{Src: src, SHA: hex.EncodeToString(h[:])}
}

// For returns the script of an algorithm, nil for an unknown one.
func For(alg driver.Algorithm) *Script {
	if int(alg) >= len(scripts) {
		return nil
	}
	return scripts[alg]
}

var scripts = [...]*Script{
	driver.AlgorithmFixedWindow:   newScript(fixedWindowAlg),
	driver.AlgorithmSlidingLog:    newScript(slidingLogAlg),
	driver.AlgorithmSlidingWindow: newScript(slidingWindowAlg),
	driver.AlgorithmTokenBucket:   newScript(tokenBucketAlg),
	driver.AlgorithmGCRA:          newScript(gcraAlg),
	driver.AlgorithmInFlight:      newScript(inFlightAlg),
}

// calendar decides fixed windows over calendar periods: calendar.lua's
// algorithm, on the fixed window's.
var calendar = newScript(calendarAlg)

// ForRule returns the script that executes r: its algorithm's, or for
// calendar periods the calendar script. nil for an unknown algorithm.
func ForRule(r *sluice.Rule) *Script {
	if !r.Calendar.IsZero() {
		return calendar
	}
	return For(r.Algorithm)
}

// clockSkew is the "allowed" a calendar script replies when the deciding
// clock is outside the periods sent: Decode returns driver.ErrClockSkew.
const clockSkew = 2

// Argument records (see batch.lua): a decision's fixed part, and the
// parts that follow it for calendar periods and for an override.
const (
	recordArgs   = 5*8 + 4
	calendarArgs = 4 * 8
	leaseArgs    = 16
	overrideArgs = 5 * 8
	penaltyArgs  = 6 * 8
)

// The record's part byte: what follows its fixed part.
const (
	partCalendar = 1
	partLease    = 2
)

// ArgsSize is the length of op's record among a call's arguments
// (AppendArgs), when it reads an override or not.
func ArgsSize(op *driver.Op, override bool) int {
	n := recordArgs
	if !op.Rule.Calendar.IsZero() {
		n += calendarArgs
	}
	if op.Rule.Algorithm == driver.AlgorithmInFlight {
		n += leaseArgs
	}
	if override {
		n += overrideArgs
	}
	if op.PenaltyKey != "" {
		n += penaltyArgs
	}
	return n
}

// AppendArgs appends op's record to the arguments of a call (the one
// string the scripts take: see batch.lua) and returns the extended
// buffer: now in microseconds (0: the server's TIME), limit, the
// algorithm's parameter, cost, and for a refund (negative cost) the
// receipt of the take it refunds, else 0, then its flags. For InFlight the
// lease id follows (Op.Lease; the flag is Op.Renew). For calendar
// periods the first instants of the four periods around the Op's time
// follow, or around clock when the server's TIME decides
// (CalendarBounds). A caller that sends op.Override among the
// call's keys passes its index in KEYS (from 1) as overrideKey, and the
// record ends with it and the bounds an override must keep to apply
// (OverrideBounds); 0 when the decision reads no override. Likewise a
// caller that sends op.PenaltyKey passes its index as penaltyKey, and the
// record ends with it and the penalty's numbers (see penalty.lua); 0 for
// none.
func AppendArgs(dst []byte, op *driver.Op, overrideKey, penaltyKey int, clock time.Time) []byte {
	var now, receipt int64
	if !op.Now.IsZero() {
		now = op.Now.UnixMicro()
	}
	lease := op.Rule.Algorithm == driver.AlgorithmInFlight
	if op.Cost < 0 && !lease {
		receipt = op.Receipt
	}
	dst = appendInt64(dst, now)
	dst = appendInt64(dst, op.Rule.Limit)
	dst = appendInt64(dst, op.Rule.Param())
	dst = appendInt64(dst, op.Cost)
	dst = appendInt64(dst, receipt)
	cal := !op.Rule.Calendar.IsZero()
	var part byte
	switch {
	case cal:
		part = partCalendar
	case lease:
		part = partLease
	}
	dst = append(dst, flag(op.Rule.CountRejected || op.Renew), part, flag(overrideKey > 0), flag(penaltyKey > 0))
	if lease {
		dst = append(dst, op.Lease[:]...)
	}
	if cal {
		dst = appendCalendar(dst, op, clock)
	}
	if overrideKey > 0 {
		dst = appendOverride(dst, op, overrideKey)
	}
	if penaltyKey > 0 {
		dst = appendPenalty(dst, &op.Penalty, penaltyKey)
	}
	return dst
}

// appendPenalty appends the penalty key's index in KEYS and p's numbers in
// microseconds: after, within, block, the longest block and forgive.
func appendPenalty(dst []byte, p *driver.Penalty, penaltyKey int) []byte {
	dst = appendInt64(dst, int64(penaltyKey))
	dst = appendInt64(dst, p.After)
	dst = appendInt64(dst, p.Within.Microseconds())
	dst = appendInt64(dst, p.Block.Microseconds())
	dst = appendInt64(dst, p.Longest().Microseconds())
	return appendInt64(dst, p.Forgive.Microseconds())
}

// appendCalendar appends the first instants of the four calendar periods
// around op's time, or clock when the server's TIME decides.
func appendCalendar(dst []byte, op *driver.Op, clock time.Time) []byte {
	t := op.Now
	if t.IsZero() {
		t = clock
	}
	return appendInt64s(dst, CalendarBounds(&op.Rule, t))
}

// appendOverride appends the override key's index in KEYS and the bounds
// an override must keep to apply.
func appendOverride(dst []byte, op *driver.Op, overrideKey int) []byte {
	dst = appendInt64(dst, int64(overrideKey))
	return appendInt64s(dst, OverrideBounds(&op.Rule))
}

// appendInt64s appends each of vs, little-endian.
func appendInt64s(dst []byte, vs [4]int64) []byte {
	for _, v := range vs {
		dst = appendInt64(dst, v)
	}
	return dst
}

func flag(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// appendInt64 appends v, little-endian.
func appendInt64(dst []byte, v int64) []byte {
	return binary.LittleEndian.AppendUint64(dst, uint64(v))
}

// ErrReply is the error of a reply that does not hold what the scripts
// return.
var ErrReply = errors.New("reply out of range")

// RecordSize is the length in bytes of one decision's record in a call's
// reply (see batch.lua): allowed, the override's status and the
// penalty's, one byte each, then remaining, retry after and reset after in microseconds, the
// receipt, the override's limit and its parameter, and the leases the
// decision reaped as ended by expiry (in-flight), each a little-endian
// int64.
const RecordSize = 3 + 7*8

// DecodeCall reads the reply of a call that decided n keys, one string
// of n records (see batch.lua), and passes each decision's Result and
// receipt to set, in order, or its error when its record is out of range
// (ErrReply, or driver.ErrClockSkew for a calendar decision whose clock is
// outside its periods). It returns an ErrReply, and calls set for none,
// when the reply does not hold n records.
func DecodeCall(reply string, n int, set func(j int, res driver.Result, receipt int64, err error)) error {
	if len(reply) != n*RecordSize {
		return fmt.Errorf("%w: %d bytes, want %d for %d decisions", ErrReply, len(reply), n*RecordSize, n)
	}
	for j := range n {
		res, receipt, err := decodeRecord(reply[j*RecordSize : (j+1)*RecordSize])
		set(j, res, receipt, err)
	}
	return nil
}

// FillCall fills in the decisions of one script call, batch[idx[j]] for
// the call's j-th key: its Result and Receipt from reply, or its Err. A
// call that failed (callErr), a reply that is not a string (replyErr) or
// does not hold len(idx) records fails every decision of the call; a
// record out of range fails its own. Errors read "<store>: <alg> script:
// <cause>"; replyErr is marked as an unexpected reply.
func FillCall(batch []driver.Op, idx []int, store string, alg driver.Algorithm, reply string, callErr, replyErr error) {
	fail := func(err error) {
		for _, i := range idx {
			batch[i].Err = err
		}
	}
	switch {
	case callErr != nil:
		fail(fmt.Errorf("%s: %v script: %w", store, alg, callErr))
		return
	case replyErr != nil:
		fail(fmt.Errorf("%s: %v script: unexpected reply: %w", store, alg, replyErr))
		return
	}
	err := DecodeCall(reply, len(idx), func(j int, res driver.Result, receipt int64, err error) {
		op := &batch[idx[j]]
		if err != nil {
			op.Err = fmt.Errorf("%s: %v script: %w", store, alg, err)
			return
		}
		op.Result, op.Receipt = res, receipt
	})
	if err != nil {
		fail(fmt.Errorf("%s: %v script: %w", store, alg, err))
	}
}

// decodeRecord turns one decision's record (allowed, the override's
// status, remaining, retry after and reset after in microseconds, receipt,
// the override's limit and parameter) into its Result and receipt.
func decodeRecord(r string) (driver.Result, int64, error) {
	rec := readRecord(r)
	if rec.allowed == clockSkew {
		return driver.Result{}, 0, driver.ErrClockSkew
	}
	if !rec.valid() {
		return driver.Result{}, 0, fmt.Errorf("%w: allowed %d, override status %d, penalty status %d, remaining %d, retry after %dµs, reset after %dµs, receipt %d, override limit %d, parameter %dµs, expired %d",
			ErrReply, rec.allowed, rec.status, rec.penalty, rec.remaining, rec.retry, rec.reset, rec.receipt, rec.ovLimit, rec.ovParam, rec.expired)
	}
	return rec.result(), rec.receipt, nil
}

// A replyRecord is one decision's record, read (see RecordSize).
type replyRecord struct {
	allowed, status, penalty         byte
	remaining, retry, reset, receipt int64
	ovLimit, ovParam, expired        int64
}

func readRecord(r string) replyRecord {
	return replyRecord{
		allowed: r[0], status: r[1], penalty: r[2],
		remaining: int64At(r, 3), retry: int64At(r, 11), reset: int64At(r, 19),
		receipt: int64At(r, 27), ovLimit: int64At(r, 35), ovParam: int64At(r, 43),
		expired: int64At(r, 51),
	}
}

// valid reports whether rec holds what the scripts return.
func (rec *replyRecord) valid() bool {
	return rec.allowed <= 1 && rec.remaining >= 0 && micros(rec.retry) && micros(rec.reset) && rec.receipt > 0 && rec.overrideValid() && rec.penaltyValid() &&
		0 <= rec.expired && rec.expired <= driver.MaxInFlightLimit
}

// penaltyValid reports whether the penalty's status (0: none, 1: blocked,
// 2: blocked by this refusal) agrees with the decision: a blocked one is
// refused, with nothing remaining and a retry.
func (rec *replyRecord) penaltyValid() bool {
	return rec.penalty == 0 || rec.penalty <= 2 && rec.allowed == 0 && rec.remaining == 0 && rec.retry > 0
}

// overrideValid reports whether the override's status (0: none, 1:
// applied, 2: invalid), limit and parameter agree: a limit and parameter
// only when applied.
func (rec *replyRecord) overrideValid() bool {
	return rec.status <= 2 && (rec.status == 1) == (rec.ovLimit > 0) && micros(rec.ovParam) && (rec.status == 1 || rec.ovParam == 0)
}

// micros reports whether v is a time.Duration in microseconds, not
// negative.
func micros(v int64) bool { return 0 <= v && v <= maxMicros }

// result is the Result rec says.
func (rec *replyRecord) result() driver.Result {
	res := driver.Result{
		Allowed:         rec.allowed == 1,
		Remaining:       rec.remaining,
		RetryAfter:      time.Duration(rec.retry) * time.Microsecond,
		ResetAfter:      time.Duration(rec.reset) * time.Microsecond,
		OverrideInvalid: rec.status == 2,
		Blocked:         rec.penalty > 0,
		BlockStarted:    rec.penalty == 2,
		Expired:         rec.expired,
	}
	if rec.status == 1 {
		res.Override, res.OverrideLimit, res.OverrideParam = true, rec.ovLimit, rec.ovParam
	}
	return res
}

// maxMicros is the longest time.Duration in microseconds.
const maxMicros = math.MaxInt64 / int64(time.Microsecond)

// int64At is the little-endian int64 at s[i:i+8].
func int64At(s string, i int) int64 {
	s = s[i : i+8]
	return int64(uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56)
}
