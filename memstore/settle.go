package memstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/luascript"
)

// Reservations (driver.Reserver), with the semantics of valkeystore's
// (luascript/scripts/reserve.lua and settle.lua): the take is Do's
// decision, the record is kept for its Life, and a settle applies the
// actual amount against the estimate under the key's lock, as the script
// does in one call.

// record is a reservation's record.
type record struct {
	estimate, receipt int64
	settled           bool
	expires           time.Time
}

// records are the store's reservation records, swept of expired ones
// every sweepEvery writes.
type records struct {
	mu     sync.Mutex
	m      map[string]*record
	writes int
}

func (rs *records) put(key string, r *record, now time.Time) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.m == nil {
		rs.m = make(map[string]*record)
	}
	rs.m[key] = r
	rs.writes++
	if rs.writes%sweepEvery == 0 {
		for k, r := range rs.m {
			if !now.Before(r.expires) {
				delete(rs.m, k)
			}
		}
	}
}

// get returns the live record under key, or nil.
func (rs *records) get(key string, now time.Time) *record {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r := rs.m[key]
	if r != nil && !now.Before(r.expires) {
		delete(rs.m, key)
		return nil
	}
	return r
}

func (rs *records) settle(key string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if r := rs.m[key]; r != nil {
		r.settled = true
	}
}

// Reserve implements driver.Reserver.
func (s *Store) Reserve(ctx context.Context, batch []driver.ReserveOp) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for i := range batch {
		op := &batch[i]
		if op.PenaltyKey != "" || !op.Penalty.IsZero() {
			op.Err = fmt.Errorf("memstore: reservation of %q: a reservation takes no penalty", op.Key)
			continue
		}
		if op.Record == "" || op.Life < time.Millisecond || op.Life%time.Millisecond != 0 || op.Cost < 0 {
			op.Err = fmt.Errorf("memstore: reservation of %q: record %q, life %v, estimate %d", op.Key, op.Record, op.Life, op.Cost)
			continue
		}
		op.Result, op.Err = s.decide(&op.Op)
		if op.Err == nil && op.Result.Allowed {
			now := s.clock()
			s.rsv.put(op.Record, &record{estimate: op.Cost, receipt: op.Receipt, expires: now.Add(op.Life)}, now)
		}
	}
	return nil
}

// Settle implements driver.Reserver.
func (s *Store) Settle(ctx context.Context, batch []driver.SettleOp) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for i := range batch {
		op := &batch[i]
		op.Result, op.Err = s.settle(op)
	}
	return nil
}

// settleOut is what a settle computes: settle.lua's reply but the status
// and the estimate.
type settleOut struct {
	remaining, retry, reset, debt, charged int64
}

// settle settles op under its key's lock: the record's status and
// estimate, the algorithm's settle on the key's state, which it keeps or
// deletes, and the record marked settled.
func (s *Store) settle(op *driver.SettleOp) (driver.SettleResult, error) {
	if err := (&driver.Op{Rule: op.Rule, Now: op.Now}).Validate(); err != nil {
		return driver.SettleResult{}, err
	}
	if op.Actual < 0 || op.Actual > driver.MaxSettle || op.MaxDebt < 0 || op.Record == "" {
		return driver.SettleResult{}, fmt.Errorf("memstore: settle of %q: actual %d, max debt %d, record %q", op.Key, op.Actual, op.MaxDebt, op.Record)
	}
	sh := s.shard(op.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	clockNow := s.clock()
	now := op.Now
	if now.IsZero() {
		now = clockNow
	}
	var st state
	it, err := sh.load(op.Key, op.Rule.Algorithm, clockNow, &st)
	if err != nil {
		return driver.SettleResult{}, err
	}
	r, _, _, _ := s.applyOverride(&driver.Op{Rule: op.Rule, Override: op.Override}, now, clockNow)
	res, receipt := s.recordOf(op.Record, clockNow)
	apply := res.Status == driver.SettleDone
	out, write, del, err := settleState(&st, it != nil, &r, now, res.Estimate-op.Actual, op.MaxDebt, receipt, apply)
	if err != nil {
		return driver.SettleResult{}, err
	}
	switch {
	case del:
		delete(sh.m, op.Key)
	case write:
		sh.keep(op.Key, it, &st, clockNow)
	}
	if apply {
		s.rsv.settle(op.Record)
	}
	res.Charged, res.Debt, res.Remaining = out.charged, out.debt, out.remaining
	res.RetryAfter = time.Duration(out.retry) * time.Microsecond
	res.ResetAfter = time.Duration(out.reset) * time.Microsecond
	return res, nil
}

// recordOf returns the status and estimate of the reservation record
// (SettleUnknown when there is none live) and the receipt of its take.
func (s *Store) recordOf(record string, clockNow time.Time) (res driver.SettleResult, receipt int64) {
	res.Status = driver.SettleUnknown
	if rec := s.rsv.get(record, clockNow); rec != nil {
		res.Status, res.Estimate, receipt = driver.SettleDone, rec.estimate, rec.receipt
		if rec.settled {
			res.Status = driver.SettleAlready
		}
	}
	return res, receipt
}

// settleState applies the settle of diff (estimate less actual; apply is
// false for one settled before) to the key's state st (exists: it has
// one) under the rule in force r at now, as settle.lua does.
func settleState(st *state, exists bool, r *driver.Rule, now time.Time, diff, maxDebt, receipt int64, apply bool) (out settleOut, write, del bool, err error) {
	us := now.UnixMicro()
	switch r.Algorithm {
	case driver.AlgorithmTokenBucket:
		out, write, del = settleBucket(st, exists, us, r.Limit, r.Param(), diff, maxDebt, apply)
	case driver.AlgorithmGCRA:
		out, write, del = settleGCRA(st, exists, us, r.Limit, r.Param(), diff, maxDebt, apply)
	case driver.AlgorithmFixedWindow:
		if r.Calendar.IsZero() {
			w := r.Param()
			idx := floorDiv(us, w)
			out, write, del = settleWindow(st, exists, us, idx, idx*w, (idx+1)*w, r.Limit, diff, maxDebt, receipt, apply)
			return out, write, del, nil
		}
		b := luascript.CalendarBounds(r, now)
		for i := 0; i < 3; i++ {
			if b[i] <= us && us < b[i+1] {
				out, write, del = settleWindow(st, exists, us, b[i], b[i], b[i+1], r.Limit, diff, maxDebt, receipt, apply)
				return out, write, del, nil
			}
		}
		return out, false, false, fmt.Errorf("memstore: %w", driver.ErrClockSkew)
	default:
		return out, false, false, fmt.Errorf("memstore: %v keeps no reservations", r.Algorithm)
	}
	return out, write, del, nil
}

// ceilDiv is ceil(a / b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// settleBucket mirrors settleBucket in settle.lua.
func settleBucket(s *state, ok bool, now, capacity, iv, diff, maxDebt int64, apply bool) (o settleOut, write, del bool) {
	full := capacity * iv
	base, from := full, now
	if ok {
		base, from = s.credit, s.ts
	}
	credit := min(full, base+max(0, now-from))
	if apply {
		if diff > 0 {
			credit = min(full, credit+diff*iv)
		} else if diff < 0 {
			if room := credit + maxDebt*iv; room > 0 {
				o.charged = min(-diff, room/iv)
			}
			credit -= o.charged * iv
		}
		if diff != 0 {
			if credit >= full {
				del = ok
			} else {
				write = true
				s.credit, s.ts, s.ttlMicro = credit, now, full-credit
			}
		}
	}
	if credit < iv {
		o.retry = iv - credit
	}
	if credit < 0 {
		o.debt = ceilDiv(-credit, iv)
	}
	o.remaining, o.reset = max(0, credit)/iv, full-credit
	return o, write, del
}

// settleGCRA mirrors settleGCRA in settle.lua.
func settleGCRA(s *state, ok bool, now, burst, iv, diff, maxDebt int64, apply bool) (o settleOut, write, del bool) {
	tat := now
	if ok && s.tat > now {
		tat = s.tat
	}
	tau := burst * iv
	if apply {
		if diff > 0 {
			tat = max(now, tat-diff*iv)
		} else if diff < 0 {
			if room := now + tau + maxDebt*iv - tat; room > 0 {
				o.charged = min(-diff, room/iv)
			}
			tat += o.charged * iv
		}
		if diff != 0 {
			if tat <= now {
				del = ok
			} else {
				write = true
				s.tat, s.ttlMicro = tat, tat-now
			}
		}
	}
	if tat-now > tau {
		o.debt = ceilDiv(tat-now-tau, iv)
	}
	o.remaining, o.retry, o.reset = max(0, now-tat+tau)/iv, max(0, tat+iv-tau-now), tat-now
	return o, write, del
}

// settleWindow mirrors settleWindow in settle.lua: the current window is
// [start, stop), named idx; the reservation was taken at receipt.
func settleWindow(s *state, ok bool, now, idx, start, stop, limit, diff, maxDebt, receipt int64, apply bool) (o settleOut, write, del bool) {
	var c int64
	if ok && s.w == idx {
		c = s.c
	}
	if apply {
		changed := false
		if diff > 0 {
			if c > 0 && start <= receipt && receipt < stop {
				c = max(0, c-diff)
				changed = true
			}
		} else if diff < 0 {
			o.charged = max(0, min(-diff, limit+maxDebt-c))
			c += o.charged
			changed = o.charged > 0
		}
		if changed {
			if c == 0 {
				del = ok
			} else {
				write = true
				s.w, s.c, s.ttlMicro = idx, c, stop-now
			}
		}
	}
	if c+1 > limit {
		o.retry = stop - now
	}
	if c > 0 {
		o.reset = stop - now
	}
	o.remaining, o.debt = max(0, limit-c), max(0, c-limit)
	return o, write, del
}
