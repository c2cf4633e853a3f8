package luascript

import (
	_ "embed"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// Reservations (driver.Reserver): a reservation's script is an
// algorithm's, ended by reserve.lua instead of one.lua, so that the take
// is the decision every other script makes; a settle's is prelude.lua
// and settle.lua, one key and its record per call.
var (
	//go:embed scripts/reserve.lua
	reserveLua string
	//go:embed scripts/settle.lua
	settleLua string
)

var reserveScripts = [...]*Script{
	driver.AlgorithmFixedWindow: sum(assemble(fixedWindowAlg, reserveLua)),
	driver.AlgorithmTokenBucket: sum(assemble(tokenBucketAlg, reserveLua)),
	driver.AlgorithmGCRA:        sum(assemble(gcraAlg, reserveLua)),
}

var reserveCalendar = sum(assemble(calendarAlg, reserveLua))

// Settle is the script that settles one reservation.
var Settle = sum(preludeLua + settleLua)

// ReserveFor returns the reservation script of r, nil for an algorithm
// that keeps no reservations.
func ReserveFor(r *sluice.Rule) *Script {
	if !r.Calendar.IsZero() {
		return reserveCalendar
	}
	if int(r.Algorithm) >= len(reserveScripts) {
		return nil
	}
	return reserveScripts[r.Algorithm]
}

// ReserveKeys returns the keys of op's reservation call, in order: the
// key, its override key when it reads one, the record's key; and the
// override key's index in them (0 for none) and the record's.
func ReserveKeys(op *driver.ReserveOp) (keys []string, overrideIdx, recordIdx int) {
	keys = []string{op.Key}
	if op.Override != "" {
		keys = append(keys, op.Override)
		overrideIdx = len(keys)
	}
	keys = append(keys, op.Record)
	return keys, overrideIdx, len(keys)
}

// AppendReserveArgs appends ARGV[2] of a reservation call: the record's
// index in KEYS, its life in milliseconds and the estimate.
func AppendReserveArgs(dst []byte, op *driver.ReserveOp, recordIdx int) []byte {
	dst = appendInt64(dst, int64(recordIdx))
	dst = appendInt64(dst, op.Life.Milliseconds())
	return appendInt64(dst, op.Cost)
}

// SettleKeys returns the keys of op's settle call: the key, the record's
// key, and the override key when it reads one; and the override key's
// index (0 for none).
func SettleKeys(op *driver.SettleOp) (keys []string, overrideIdx int) {
	keys = []string{op.Key, op.Record}
	if op.Override != "" {
		keys = append(keys, op.Override)
		overrideIdx = 3
	}
	return keys, overrideIdx
}

// AppendSettleArgs appends the two arguments of op's settle call (ARGV[1],
// a decision's record of cost the actual amount, and ARGV[2], the debt
// bound and the algorithm) to dst, returning the buffer and where ARGV[2]
// starts in it; clock is as for AppendArgs.
func AppendSettleArgs(dst []byte, op *driver.SettleOp, overrideIdx int, clock time.Time) ([]byte, int) {
	o := driver.Op{Key: op.Key, Rule: op.Rule, Cost: op.Actual, Now: op.Now}
	dst = AppendArgs(dst, &o, overrideIdx, 0, clock)
	split := len(dst)
	dst = appendInt64(dst, op.MaxDebt)
	var alg byte = 1
	switch op.Rule.Algorithm {
	case driver.AlgorithmTokenBucket:
		alg = 2
	case driver.AlgorithmGCRA:
		alg = 3
	}
	return append(dst, alg), split
}

// SettleReplySize is the length of a settle call's reply.
const SettleReplySize = 1 + 6*8

// DecodeSettle reads a settle call's reply.
func DecodeSettle(reply string) (driver.SettleResult, error) {
	if len(reply) != SettleReplySize {
		return driver.SettleResult{}, fmt.Errorf("%w: settle reply of %d bytes, want %d", ErrReply, len(reply), SettleReplySize)
	}
	status := reply[0]
	remaining, retry, reset := int64At(reply, 1), int64At(reply, 9), int64At(reply, 17)
	debt, charged, estimate := int64At(reply, 25), int64At(reply, 33), int64At(reply, 41)
	if status == 3 {
		return driver.SettleResult{}, driver.ErrClockSkew
	}
	if status > 2 || remaining < 0 || retry < 0 || retry > maxMicros || reset < 0 || reset > maxMicros || debt < 0 || charged < 0 || estimate < 0 {
		return driver.SettleResult{}, fmt.Errorf("%w: settle status %d, remaining %d, retry after %dµs, reset after %dµs, debt %d, charged %d, estimate %d",
			ErrReply, status, remaining, retry, reset, debt, charged, estimate)
	}
	return driver.SettleResult{
		Status:     driver.SettleStatus(status),
		Estimate:   estimate,
		Charged:    charged,
		Remaining:  remaining,
		RetryAfter: time.Duration(retry) * time.Microsecond,
		ResetAfter: time.Duration(reset) * time.Microsecond,
		Debt:       debt,
	}, nil
}
