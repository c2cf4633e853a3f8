package memstore

import (
	"math"
	"sort"

	"github.com/sluicehq/sluice/driver"
)

// The algorithms below are the Go twins of luascript/scripts/*.lua. They
// compute in the same order with the same float64 operations as Lua (whose
// numbers are all doubles), so both stores return identical Results for
// identical inputs; the differential tests in package sluicetest hold them
// to that. Times are microseconds since the Unix epoch.

// reply is one decision: the five numbers a script returns per key.
type reply struct {
	allowed   bool
	remaining int64
	retry     int64 // microseconds
	reset     int64 // microseconds
	receipt   int64 // what a refund passes back; zero for the time of the decision
	expired   int64 // in-flight: the leases reaped as ended by expiry
}

// state is the value kept under one key. Only the fields of the key's
// algorithm are used.
type state struct {
	alg      driver.Algorithm
	w, c, p  int64                    // fixed and sliding window: window number, count, previous count
	credit   int64                    // token bucket: microseconds of credit
	ts       int64                    // token bucket: time of credit
	tat      int64                    // GCRA: theoretical arrival time
	log      []int64                  // sliding log: sorted times
	leases   map[driver.LeaseID]int64 // in-flight: when each lease ends
	ttlMicro int64                    // time to live from now, set by the algorithm when it writes
}

// retryLoops bounds the search for the first microsecond at which a refused
// request is allowed, past the closed-form estimate (float rounding).
const retryLoops = 64

func floorDiv(a, b int64) int64 { return int64(math.Floor(float64(a) / float64(b))) }

// Each algorithm takes the key's state s (ok reports whether the key
// existed; s is zero otherwise) and returns the reply, whether s is to be
// written (with the time to live s.ttlMicro) and whether the key is to be
// deleted.
//
// A negative cost refunds the take whose receipt is given: its time for
// every algorithm but GCRA, whose receipt is the TAT the take wrote.
func fixedWindow(s *state, ok bool, now, limit, window, cost int64, countRejected bool, receipt int64) (r reply, write, del bool) {
	idx := floorDiv(now, window)
	return fixedSpan(s, ok, now, idx, idx*window, (idx+1)*window, limit, cost, countRejected, receipt)
}

// calendarWindow is fixedWindow over calendar periods: bounds are the first
// instants of four consecutive periods (luascript.CalendarBounds), among
// which now falls; the window is named by its first instant. ok is false
// when now is outside them.
func calendarWindow(s *state, exists bool, now int64, bounds [4]int64, limit, cost int64, countRejected bool, receipt int64) (r reply, write, del, ok bool) {
	for i := 0; i < 3; i++ {
		if bounds[i] <= now && now < bounds[i+1] {
			r, write, del = fixedSpan(s, exists, now, bounds[i], bounds[i], bounds[i+1], limit, cost, countRejected, receipt)
			return r, write, del, true
		}
	}
	return reply{}, false, false, false
}

// fixedSpan decides in the window [start, end) named id.
func fixedSpan(s *state, ok bool, now, id, start, end, limit, cost int64, countRejected bool, receipt int64) (r reply, write, del bool) {
	c := windowCount(s, ok, id)
	reset := end - now
	if cost < 0 {
		// Only the units of this window, never a newer one's.
		return fixedRefund(s, id, c, start <= receipt && receipt < end, reset, limit, cost)
	}
	c, write = fixedTake(&r, c, limit, cost, countRejected, reset)
	r.reset = resetIfCounted(c, reset)
	if write {
		writeFW(s, id, c, reset)
	}
	return r, write, false
}

// windowCount is the count s holds for window id (ok: the key existed).
func windowCount(s *state, ok bool, id int64) int64 {
	if ok && s.w == id {
		return s.c
	}
	return 0
}

// fixedRefund gives back -cost of the count c of window id when the take
// counted in it (inWindow), deleting the key when nothing is left.
func fixedRefund(s *state, id, c int64, inWindow bool, reset, limit, cost int64) (r reply, write, del bool) {
	if c > 0 && inWindow {
		c = max(0, c+cost)
		if c == 0 {
			return reply{allowed: true, remaining: limit}, false, true
		}
		write = writeFW(s, id, c, reset)
	}
	return reply{allowed: true, remaining: max(0, limit-c), reset: resetIfCounted(c, reset)}, write, false
}

// fixedTake decides a take of cost on the count c into r, returning the
// new count and whether it is to be written.
func fixedTake(r *reply, c, limit, cost int64, countRejected bool, reset int64) (next int64, write bool) {
	if c+max(cost, 1) <= limit {
		if cost > 0 {
			c, write = c+cost, true
		}
		*r = reply{allowed: true, remaining: limit - c}
		return c, write
	}
	if countRejected && cost > 0 {
		c, write = c+cost, true
	}
	*r = reply{remaining: max(0, limit-c), retry: reset}
	return c, write
}

// resetIfCounted is reset when the window counts anything, else zero.
func resetIfCounted(c, reset int64) int64 {
	if c > 0 {
		return reset
	}
	return 0
}

func writeFW(s *state, idx, c, ttl int64) bool {
	s.w, s.c, s.ttlMicro = idx, c, ttl
	return true
}

// slidingLog keeps s.log sorted ascending.
func slidingLog(s *state, ok bool, now, limit, window, cost int64, countRejected bool, receipt int64) (r reply, write, del bool) {
	dropped := s.dropLogUntil(now - window)
	var changed bool
	if cost < 0 {
		changed = s.refundLog(receipt, -cost)
		r.allowed = true
	} else {
		changed = s.takeLog(&r, now, limit, window, cost, countRejected)
	}
	write, del = s.finishLog(&r, dropped || changed, now, limit, window)
	return r, write, del
}

// dropLogUntil drops the entries at or before t, reporting whether any were.
func (s *state) dropLogUntil(t int64) bool {
	cut := sort.Search(len(s.log), func(i int) bool { return s.log[i] > t })
	if cut == 0 {
		return false
	}
	s.log = append(s.log[:0], s.log[cut:]...)
	return true
}

// refundLog removes up to n entries of the take's time, no others.
func (s *state) refundLog(receipt, n int64) bool {
	from := sort.Search(len(s.log), func(i int) bool { return s.log[i] >= receipt })
	to := from
	for to < len(s.log) && s.log[to] == receipt && int64(to-from) < n {
		to++
	}
	if to == from {
		return false
	}
	s.log = append(s.log[:from], s.log[to:]...)
	return true
}

// takeLog decides a take of cost at now, logging it when allowed (or
// refused and countRejected).
func (s *state) takeLog(r *reply, now, limit, window, cost int64, countRejected bool) (write bool) {
	need := max(cost, 1)
	r.allowed = int64(len(s.log))+need <= limit
	if cost > 0 && (r.allowed || countRejected) {
		s.log = trimLog(insertN(s.log, now, cost), limit)
		write = true
	}
	if !r.allowed {
		r.retry = logRetry(s.log, now, window, limit, need)
	}
	return write
}

// trimLog keeps the newest limit entries of log.
func trimLog(log []int64, limit int64) []int64 {
	if int64(len(log)) > limit {
		return append(log[:0], log[int64(len(log))-limit:]...)
	}
	return log
}

// logRetry is the wait before need more fit the log. A cost over the limit
// in force (an override lowered it) waits for the whole log, or a window.
func logRetry(log []int64, now, window, limit, need int64) int64 {
	if k := min(int64(len(log))+need-limit, int64(len(log))); k > 0 {
		return log[k-1] + window - now
	}
	return window
}

// finishLog completes r from the log left, deleting an empty key.
func (s *state) finishLog(r *reply, write bool, now, limit, window int64) (bool, bool) {
	count := int64(len(s.log))
	r.remaining = max(0, limit-count)
	if count == 0 {
		return false, write
	}
	r.reset = s.log[count-1] + window - now
	s.ttlMicro = r.reset
	return write, false
}

// insertN inserts n copies of t into the sorted slice.
func insertN(log []int64, t, n int64) []int64 {
	i := sort.Search(len(log), func(i int) bool { return log[i] > t })
	out := make([]int64, 0, int64(len(log))+n)
	out = append(out, log[:i]...)
	for range n {
		out = append(out, t)
	}
	return append(out, log[i:]...)
}

func slidingWindow(s *state, ok bool, now, limit, window, cost int64, receipt int64) (r reply, write, del bool) {
	idx := floorDiv(now, window)
	elapsed := now - idx*window
	cur, prev := swCounts(s, ok, idx)
	if cost < 0 {
		// Back to the window the take counted in, never a newer one.
		r.allowed = true
		cur, prev, write = swRefund(floorDiv(receipt, window), idx, cur, prev, cost)
	} else {
		r.allowed, r.retry, cur, write = swTake(prev, cur, elapsed, window, limit, cost)
	}
	r.remaining = max(0, int64(math.Floor(float64(limit)-swEstimate(prev, cur, elapsed, window))))
	r.reset = swReset(cur, prev, elapsed, window)
	if write {
		s.w, s.c, s.p, s.ttlMicro = idx, cur, prev, r.reset
		if r.reset == 0 {
			return r, false, ok
		}
	}
	return r, write, false
}

// swEstimate is the sliding window's count elapsed into the current window.
func swEstimate(prev, cur, elapsed, window int64) float64 {
	return float64(prev)*(float64(window-elapsed)/float64(window)) + float64(cur)
}

// swCounts is the current and previous windows' counts s holds at window idx.
func swCounts(s *state, ok bool, idx int64) (cur, prev int64) {
	if !ok {
		return 0, 0
	}
	switch {
	case s.w >= idx: // s.w > idx only when a client clock went back
		return s.c, s.p
	case s.w == idx-1:
		return 0, s.c
	}
	return 0, 0
}

// swRefund gives -cost back to the window from, when it is the current or
// previous window (idx, idx-1) and counts anything.
func swRefund(from, idx, cur, prev, cost int64) (int64, int64, bool) {
	switch {
	case from == idx && cur > 0:
		return max(0, cur+cost), prev, true
	case from == idx-1 && prev > 0:
		return cur, max(0, prev+cost), true
	}
	return cur, prev, false
}

// swTake decides a take of cost: whether it is allowed, else the wait
// before it would be, the new current count and whether to write it.
func swTake(prev, cur, elapsed, window, limit, cost int64) (allowed bool, retry, next int64, write bool) {
	need := max(cost, 1)
	if swEstimate(prev, cur, elapsed, window)+float64(need) <= float64(limit) {
		if cost > 0 {
			return true, 0, cur + cost, true
		}
		return true, 0, cur, false
	}
	return false, swRetry(prev, cur, elapsed, window, limit, need), cur, false
}

// swReset is the time until both windows' counts are gone.
func swReset(cur, prev, elapsed, window int64) int64 {
	switch {
	case cur > 0:
		return 2*window - elapsed
	case prev > 0:
		return window - elapsed
	}
	return 0
}

// swRetry finds the first microsecond t at which estimate+need <= limit.
func swRetry(prev, cur, elapsed, window, limit, need int64) int64 {
	fw, fl, fn := float64(window), float64(limit), float64(need)
	left := window - elapsed
	if cur+need <= limit {
		// Within this window, as the previous window's weight decays.
		t := int64(math.Ceil(float64(left) - float64(limit-cur-need)*fw/float64(prev)))
		return firstFit(max(t, 0), left, func(t int64) bool { return swEstimate(prev, cur, elapsed+t, window)+fn <= fl })
	}
	// In the next window, cur becomes the previous count.
	t := int64(math.Ceil(fw - float64(limit-need)*fw/float64(cur)))
	return left + firstFit(max(t, 0), window, func(t int64) bool { return swEstimate(cur, 0, t, window)+fn <= fl })
}

// firstFit steps t up, at most retryLoops times past the closed-form
// estimate, to the first t before end that fits; end when none does.
func firstFit(t, end int64, fits func(int64) bool) int64 {
	for i := 0; i < retryLoops && t < end && !fits(t); i++ {
		t++
	}
	if t < end && fits(t) {
		return t
	}
	return end
}

// tokenBucket keeps the credit in microseconds (interval per token, at
// most capacity × interval) and the time of that credit: integers, exact.
func tokenBucket(s *state, ok bool, now, capacity, interval, cost, receipt int64) (r reply, write, del bool) {
	full := capacity * interval
	base, from := creditOf(s, ok, full, now) // the credit at time from
	if cost < 0 {
		// Undo the take if no later decision wrote the key (the state is
		// still of the take's time), as if it had not happened.
		return s.refundCredit(ok && from == receipt, base, from, now, full, interval, cost)
	}
	credit := min(full, base+max(0, now-from))
	r.allowed, r.retry, credit, write = takeCredit(credit, base, from, now, interval, cost)
	if write {
		base, from = credit, now
	}
	r.remaining = max(0, credit) / interval // none while in debt (see settle.go)
	r.reset = max(0, from+full-base-now)
	if !write {
		return r, false, false
	}
	write, del = s.keepCredit(r.reset, credit, now, ok)
	return r, write, del
}

// creditOf is the credit s holds and its time (ok: the key existed), or a
// full bucket now.
func creditOf(s *state, ok bool, full, now int64) (base, from int64) {
	if ok {
		return s.credit, s.ts
	}
	return full, now
}

// refundCredit gives -cost tokens back to the credit base of time from
// when undo, deleting the key once the bucket is full.
func (s *state) refundCredit(undo bool, base, from, now, full, interval, cost int64) (r reply, write, del bool) {
	if undo {
		base = min(full, base-cost*interval)
	}
	credit := min(full, base+max(0, now-from))
	r = reply{allowed: true, remaining: max(0, credit) / interval, reset: max(0, from+full-base-now)}
	switch {
	case !undo:
	case credit >= full:
		del = true
	default:
		write = true
		s.credit, s.ts, s.ttlMicro = base, from, from+full-base-now
	}
	return r, write, del
}

// takeCredit decides a take of cost from credit (base at time from, now):
// whether it is allowed, else the wait before it would be, the credit
// left and whether it is to be written.
func takeCredit(credit, base, from, now, interval, cost int64) (allowed bool, retry, next int64, write bool) {
	need := max(cost, 1) * interval
	switch {
	case credit < need:
		return false, from + need - base - now, credit, false
	case cost > 0:
		return true, 0, credit - cost*interval, true
	}
	return true, 0, credit, false
}

// keepCredit writes credit of time now, living ttl, and reports whether
// the key is written; a bucket full again (ttl 0) is deleted instead when
// the key existed.
func (s *state) keepCredit(ttl, credit, now int64, existed bool) (write, del bool) {
	if ttl == 0 {
		return false, existed
	}
	s.credit, s.ts, s.ttlMicro = credit, now, ttl
	return true, false
}

func gcra(s *state, ok bool, now, burst, interval, cost, receipt int64) (r reply, write, del bool) {
	tat := gcraTAT(s, ok, now)
	tau := interval * burst
	if cost < 0 {
		// Undo the take if its TAT is still the TAT: no later take.
		r.allowed = true
		tat, write = gcraRefund(s, ok, now, tat, interval, cost, receipt)
	} else {
		tat, write = gcraTake(&r, now, tat, tau, interval, cost)
	}
	r.remaining = max(0, now-tat+tau) / interval
	r.reset = tat - now
	r.receipt = tat
	if write {
		if r.reset <= 0 {
			return r, false, ok
		}
		s.tat, s.ttlMicro = tat, r.reset
	}
	return r, write, false
}

// gcraTAT is the theoretical arrival time the decision starts from.
func gcraTAT(s *state, ok bool, now int64) int64 {
	if ok && s.tat > now {
		return s.tat
	}
	return now
}

// gcraRefund moves tat back by -cost intervals when the key's TAT is the
// take's (receipt).
func gcraRefund(s *state, ok bool, now, tat, interval, cost, receipt int64) (int64, bool) {
	if ok && s.tat == receipt {
		return max(now, tat+cost*interval), true
	}
	return tat, false
}

// gcraTake decides a take of cost into r (allowed, else the wait before
// it would be), returning the new TAT and whether to write it.
func gcraTake(r *reply, now, tat, tau, interval, cost int64) (next int64, write bool) {
	newTat := tat + max(cost, 1)*interval
	diff := now - (newTat - tau)
	if diff < 0 {
		r.retry = -diff
		return tat, false
	}
	r.allowed = true
	if cost > 0 {
		return newTat, true
	}
	return tat, false
}
