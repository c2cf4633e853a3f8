package memstore

import (
	"math"
	"sort"

	"github.com/sluicehq/sluice"
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
}

// state is the value kept under one key. Only the fields of the key's
// algorithm are used.
type state struct {
	alg      sluice.Algorithm
	w, c, p  int64   // fixed and sliding window: window number, count, previous count
	credit   int64   // token bucket: microseconds of credit
	ts       int64   // token bucket: time of credit
	tat      int64   // GCRA: theoretical arrival time
	log      []int64 // sliding log: sorted times
	ttlMicro int64   // time to live from now, set by the algorithm when it writes
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
	idx := id
	var c int64
	if ok && s.w == idx {
		c = s.c
	}
	reset := end - now
	if cost < 0 {
		// Only the units of this window, never a newer one's.
		if c > 0 && start <= receipt && receipt < end {
			c = max(0, c+cost)
			if c == 0 {
				return reply{allowed: true, remaining: limit}, false, true
			}
			write = writeFW(s, idx, c, reset)
		}
		r = reply{allowed: true, remaining: max(0, limit-c)}
		if c > 0 {
			r.reset = reset
		}
		return r, write, false
	}
	need := max(cost, 1)
	if c+need <= limit {
		if cost > 0 {
			c += cost
			write = true
		}
		r = reply{allowed: true, remaining: limit - c}
	} else {
		if countRejected && cost > 0 {
			c += cost
			write = true
		}
		r = reply{remaining: max(0, limit-c), retry: reset}
	}
	if c > 0 {
		r.reset = reset
	}
	if write {
		writeFW(s, idx, c, reset)
	}
	return r, write, false
}

func writeFW(s *state, idx, c, ttl int64) bool {
	s.w, s.c, s.ttlMicro = idx, c, ttl
	return true
}

// slidingLog keeps s.log sorted ascending.
func slidingLog(s *state, ok bool, now, limit, window, cost int64, countRejected bool, receipt int64) (r reply, write, del bool) {
	// Drop entries at or before now-window.
	cut := sort.Search(len(s.log), func(i int) bool { return s.log[i] > now-window })
	if cut > 0 {
		s.log = append(s.log[:0], s.log[cut:]...)
		write = true
	}
	if cost < 0 {
		// The entries of the take's time, no others.
		from := sort.Search(len(s.log), func(i int) bool { return s.log[i] >= receipt })
		to := from
		for to < len(s.log) && s.log[to] == receipt && int64(to-from) < -cost {
			to++
		}
		if to > from {
			s.log = append(s.log[:from], s.log[to:]...)
			write = true
		}
	} else {
		need := max(cost, 1)
		count := int64(len(s.log))
		r.allowed = count+need <= limit
		if cost > 0 && (r.allowed || countRejected) {
			s.log = insertN(s.log, now, cost)
			if int64(len(s.log)) > limit {
				s.log = append(s.log[:0], s.log[int64(len(s.log))-limit:]...)
			}
			write = true
		}
		if !r.allowed {
			// A cost over the limit in force (an override lowered it) waits
			// for the whole log, or a window.
			if k := min(int64(len(s.log))+need-limit, int64(len(s.log))); k > 0 {
				r.retry = s.log[k-1] + window - now
			} else {
				r.retry = window
			}
		}
	}
	count := int64(len(s.log))
	r.remaining = max(0, limit-count)
	if cost < 0 {
		r.allowed = true
	}
	if count == 0 {
		return r, false, write
	}
	r.reset = s.log[count-1] + window - now
	s.ttlMicro = r.reset
	return r, write, false
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
	var cur, prev int64
	if ok {
		switch {
		case s.w >= idx: // s.w > idx only when a client clock went back
			cur, prev = s.c, s.p
		case s.w == idx-1:
			prev = s.c
		}
	}
	fw := float64(window)
	estimate := func(prev, cur, elapsed int64) float64 {
		return float64(prev)*(float64(window-elapsed)/fw) + float64(cur)
	}
	if cost < 0 {
		// Back to the window the take counted in, never a newer one.
		r.allowed = true
		switch from := floorDiv(receipt, window); {
		case from == idx && cur > 0:
			cur = max(0, cur+cost)
			write = true
		case from == idx-1 && prev > 0:
			prev = max(0, prev+cost)
			write = true
		}
	} else {
		need := max(cost, 1)
		if estimate(prev, cur, elapsed)+float64(need) <= float64(limit) {
			r.allowed = true
			if cost > 0 {
				cur += cost
				write = true
			}
		} else {
			r.retry = swRetry(prev, cur, elapsed, window, limit, need, estimate)
		}
	}
	r.remaining = max(0, int64(math.Floor(float64(limit)-estimate(prev, cur, elapsed))))
	switch {
	case cur > 0:
		r.reset = 2*window - elapsed
	case prev > 0:
		r.reset = window - elapsed
	}
	if write {
		s.w, s.c, s.p, s.ttlMicro = idx, cur, prev, r.reset
		if r.reset == 0 {
			return r, false, ok
		}
	}
	return r, write, false
}

// swRetry finds the first microsecond t at which estimate+need <= limit.
func swRetry(prev, cur, elapsed, window, limit, need int64, estimate func(int64, int64, int64) float64) int64 {
	fw, fl, fn := float64(window), float64(limit), float64(need)
	left := window - elapsed
	if cur+need <= limit {
		// Within this window, as the previous window's weight decays.
		t := int64(math.Ceil(float64(left) - float64(limit-cur-need)*fw/float64(prev)))
		t = max(t, 0)
		for i := 0; i < retryLoops && t < left && estimate(prev, cur, elapsed+t)+fn > fl; i++ {
			t++
		}
		if t < left && estimate(prev, cur, elapsed+t)+fn <= fl {
			return t
		}
		return left
	}
	// In the next window, cur becomes the previous count.
	t := int64(math.Ceil(fw - float64(limit-need)*fw/float64(cur)))
	t = max(t, 0)
	for i := 0; i < retryLoops && t < window && estimate(cur, 0, t)+fn > fl; i++ {
		t++
	}
	if t < window && estimate(cur, 0, t)+fn <= fl {
		return left + t
	}
	return left + window
}

// tokenBucket keeps the credit in microseconds (interval per token, at
// most capacity × interval) and the time of that credit: integers, exact.
func tokenBucket(s *state, ok bool, now, capacity, interval, cost, receipt int64) (r reply, write, del bool) {
	full := capacity * interval
	base, from := full, now // the credit at time from
	if ok {
		base, from = s.credit, s.ts
	}
	credit := min(full, base+max(0, now-from))
	if cost < 0 {
		// Undo the take if no later decision wrote the key (the state is
		// still of the take's time), as if it had not happened.
		r.allowed = true
		if ok && from == receipt {
			base = min(full, base-cost*interval)
			credit = min(full, base+max(0, now-from))
			if credit >= full {
				del = true
			} else {
				write = true
				s.credit, s.ts, s.ttlMicro = base, from, from+full-base-now
			}
		}
		r.remaining = max(0, credit) / interval // none while in debt (see settle.go)
		r.reset = max(0, from+full-base-now)
		return r, write, del
	}
	need := max(cost, 1) * interval
	if credit >= need {
		r.allowed = true
		if cost > 0 {
			credit -= cost * interval
			write = true
		}
	} else {
		r.retry = from + need - base - now
	}
	if write {
		base, from = credit, now
	}
	r.remaining = max(0, credit) / interval // none while in debt (see settle.go)
	r.reset = max(0, from+full-base-now)
	if write {
		if r.reset == 0 {
			return r, false, ok
		}
		s.credit, s.ts, s.ttlMicro = credit, now, r.reset
	}
	return r, write, false
}

func gcra(s *state, ok bool, now, burst, interval, cost, receipt int64) (r reply, write, del bool) {
	tat := now
	if ok && s.tat > now {
		tat = s.tat
	}
	tau := interval * burst
	if cost < 0 {
		// Undo the take if its TAT is still the TAT: no later take.
		r.allowed = true
		if ok && s.tat == receipt {
			tat = max(now, tat+cost*interval)
			write = true
		}
	} else {
		need := max(cost, 1)
		newTat := tat + need*interval
		diff := now - (newTat - tau)
		if diff >= 0 {
			r.allowed = true
			if cost > 0 {
				tat = newTat
				write = true
			}
		} else {
			r.retry = -diff
		}
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
