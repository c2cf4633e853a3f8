// Package refmodel is an exact reference model of Sluice's five algorithms,
// written apart from the stores (it shares no code with memstore or the Lua
// scripts) to test them against: plain Go, integers of microseconds, the
// state kept in its most obvious form (every window's count, every
// request's time, the time a bucket is full again), and no expiry (a
// store's key outlives its use, so expiry changes no answer).
//
// Its answers are what docs/guarantees.md promises: a request is allowed when its
// cost fits; RetryAfter is the first microsecond at which the same request
// would be allowed if nothing else is taken; ResetAfter the time until the
// limit is fully restored; Remaining what could be taken right now; a
// refund gives back exactly what its take took, in the window it took it
// from, or nothing.
//
// Sizes: the sliding window's arithmetic multiplies counts by the window in
// microseconds, so keep Limit × Window under 2^62 µs (any test size is).
package refmodel

import (
	"sort"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// Result is a decision, durations in microseconds.
type Result struct {
	Allowed    bool
	Remaining  int64
	RetryAfter int64
	ResetAfter int64
}

// Model is the state of every key of one rule.
type Model struct {
	alg           driver.Algorithm
	limit         int64
	window        int64 // µs: window algorithms
	interval      int64 // µs: token bucket and GCRA
	countRejected bool
	keys          map[string]*key
}

type key struct {
	counts map[int64]int64 // window algorithms: units counted in each window
	log    []int64         // sliding log: the time of every unit, ascending
	full   int64           // token bucket, GCRA: when the bucket is full again
	taken  int64           // token bucket: the time of the last take
}

// New returns a model of rule with no state.
func New(rule sluice.Rule) *Model {
	return &Model{alg: rule.Algorithm, limit: rule.Limit, window: rule.Window.Microseconds(),
		interval: rule.Interval.Microseconds(), countRejected: rule.CountRejected, keys: map[string]*key{}}
}

func (m *Model) key(k string) *key {
	s := m.keys[k]
	if s == nil {
		s = &key{counts: map[int64]int64{}}
		m.keys[k] = s
	}
	return s
}

// Reset forgets k.
func (m *Model) Reset(k string) { delete(m.keys, k) }

// floorDiv is ⌊a/b⌋ for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// Decide decides a request of cost (0 peeks) for k at now, and returns the
// receipt a refund of it must carry.
func (m *Model) Decide(k string, now, cost int64) (Result, int64) {
	s := m.key(k)
	need := max(cost, 1)
	switch m.alg {
	case driver.AlgorithmFixedWindow:
		return m.fixedWindow(s, now, cost, need), now
	case driver.AlgorithmSlidingWindow:
		return m.slidingWindow(s, now, cost, need), now
	case driver.AlgorithmSlidingLog:
		return m.slidingLog(s, now, cost, need), now
	case driver.AlgorithmTokenBucket, driver.AlgorithmGCRA:
		return m.bucket(s, now, cost, need)
	}
	panic("refmodel: unknown algorithm")
}

// fixedWindow decides cost at now, counted in the window of now.
func (m *Model) fixedWindow(s *key, now, cost, need int64) Result {
	w := floorDiv(now, m.window)
	end := (w + 1) * m.window
	r := Result{Allowed: s.counts[w]+need <= m.limit}
	if cost > 0 && (r.Allowed || m.countRejected) {
		s.counts[w] += cost
	}
	if !r.Allowed {
		r.RetryAfter = end - now
	}
	return m.fixedAfter(s, r, now)
}

// bucket decides cost at now for the token bucket and GCRA, which keep
// the same state (when the bucket is full again) and differ in the
// receipt: the time of the take, or for GCRA where the take left the
// bucket.
func (m *Model) bucket(s *key, now, cost, need int64) (Result, int64) {
	tau := m.limit * m.interval // the time to fill from empty
	debt := max(0, s.full-now)  // how far from full
	r := Result{Allowed: debt+need*m.interval <= tau}
	if r.Allowed && cost > 0 {
		s.full = max(s.full, now) + cost*m.interval
		s.taken = now
	}
	if !r.Allowed {
		r.RetryAfter = debt + need*m.interval - tau
	}
	r = m.bucketAfter(s, r, now)
	if m.alg == driver.AlgorithmGCRA {
		return r, max(s.full, now)
	}
	return r, now
}

// Refund gives back n units taken by the decision with receipt, at now.
func (m *Model) Refund(k string, now, n, receipt int64) Result {
	s := m.key(k)
	r := Result{Allowed: true}
	switch m.alg {
	case driver.AlgorithmFixedWindow:
		// Only the take's window, which matters only while it is current.
		m.refundWindow(s, n, receipt)
		return m.fixedAfter(s, r, now)
	case driver.AlgorithmSlidingWindow:
		m.refundWindow(s, n, receipt)
		return m.slidingWindow(s, now, -1, 1)
	case driver.AlgorithmSlidingLog:
		s.log = m.refundLog(s.log, now, n, receipt)
		return m.slidingLog(s, now, -1, 1)
	case driver.AlgorithmTokenBucket:
		m.refundTokenBucket(s, n, receipt)
		return m.bucketAfter(s, r, now)
	case driver.AlgorithmGCRA:
		m.refundGCRA(s, now, n, receipt)
		return m.bucketAfter(s, r, now)
	}
	panic("refmodel: unknown algorithm")
}

// refundWindow gives back n units to the window of the take at receipt,
// never below zero.
func (m *Model) refundWindow(s *key, n, receipt int64) {
	w := floorDiv(receipt, m.window)
	s.counts[w] = max(0, s.counts[w]-n)
}

// refundLog returns log without n entries of the take's time, receipt,
// that are still in the window at now.
func (m *Model) refundLog(log []int64, now, n, receipt int64) []int64 {
	var out []int64
	for _, t := range log {
		if t == receipt && n > 0 && t > now-m.window {
			n--
			continue
		}
		out = append(out, t)
	}
	return out
}

// refundTokenBucket gives back n units only while no later take wrote the
// bucket: as if the take never was, which cannot make the bucket fuller
// than it was at the take.
func (m *Model) refundTokenBucket(s *key, n, receipt int64) {
	if s.taken == receipt {
		s.full = max(receipt, s.full-n*m.interval)
	}
}

// refundGCRA gives back n units only while the bucket is where the take
// left it.
func (m *Model) refundGCRA(s *key, now, n, receipt int64) {
	if s.full == receipt {
		s.full = max(now, s.full-n*m.interval)
	}
}

func (m *Model) fixedAfter(s *key, r Result, now int64) Result {
	w := floorDiv(now, m.window)
	c := s.counts[w]
	r.Remaining = max(0, m.limit-c)
	if c > 0 {
		r.ResetAfter = (w+1)*m.window - now
	}
	return r
}

func (m *Model) bucketAfter(s *key, r Result, now int64) Result {
	debt := max(0, s.full-now)
	r.Remaining = (m.limit*m.interval - debt) / m.interval
	r.ResetAfter = debt
	return r
}

// slidingLog decides cost (negative: only report) at now.
func (m *Model) slidingLog(s *key, now, cost, need int64) Result {
	live := m.liveLog(s.log, now)
	r := Result{Allowed: true}
	if cost >= 0 {
		r.Allowed = int64(len(live))+need <= m.limit
		live = m.logTake(live, now, cost, r.Allowed)
		if !r.Allowed {
			// The same request fits once enough of the oldest units leave.
			k := int64(len(live)) + need - m.limit
			r.RetryAfter = live[k-1] + m.window - now
		}
	}
	s.log = live
	r.Remaining = max(0, m.limit-int64(len(live)))
	if len(live) > 0 {
		r.ResetAfter = live[len(live)-1] + m.window - now
	}
	return r
}

// liveLog returns the entries of log still in the window at now.
func (m *Model) liveLog(log []int64, now int64) []int64 {
	var live []int64
	for _, t := range log {
		if t > now-m.window {
			live = append(live, t)
		}
	}
	return live
}

// logTake returns live with cost units at now added when they count (the
// request is allowed, or rejected units count), sorted, keeping the newest
// Limit entries.
func (m *Model) logTake(live []int64, now, cost int64, allowed bool) []int64 {
	if cost <= 0 || !(allowed || m.countRejected) {
		return live
	}
	for range cost {
		live = append(live, now)
	}
	sort.Slice(live, func(i, j int) bool { return live[i] < live[j] })
	if int64(len(live)) > m.limit { // count_rejected keeps the newest
		live = live[int64(len(live))-m.limit:]
	}
	return live
}

// slidingWindow decides cost (negative: only report) at now. A request of
// need fits at elapsed e of window w when
//
//	prev × (Window − e) / Window + cur + need ≤ Limit,
//
// compared here in integers (both sides times Window).
func (m *Model) slidingWindow(s *key, now, cost, need int64) Result {
	W, L := m.window, m.limit
	w := floorDiv(now, W)
	e := now - w*W
	cur, prev := s.counts[w], s.counts[w-1]
	fits := func(prev, cur, e int64) bool { return prev*(W-e)+(cur+need)*W <= L*W }
	r := Result{Allowed: true}
	if cost >= 0 {
		r.Allowed = fits(prev, cur, e)
		if r.Allowed && cost > 0 {
			cur += cost
			s.counts[w] = cur
		}
		if !r.Allowed {
			r.RetryAfter = m.swRetry(prev, cur, e, need, fits)
		}
	}
	return m.slidingAfter(r, prev, cur, e)
}

// slidingAfter fills in Remaining and ResetAfter of r for counts prev and
// cur at elapsed e of the current window.
func (m *Model) slidingAfter(r Result, prev, cur, e int64) Result {
	W, L := m.window, m.limit
	if left := L*W - prev*(W-e) - cur*W; left > 0 {
		r.Remaining = left / W
	}
	switch {
	case cur > 0:
		r.ResetAfter = 2*W - e
	case prev > 0:
		r.ResetAfter = W - e
	}
	return r
}

// swRetry is the first microsecond at which fits holds: in this window,
// the next (where cur becomes the previous count), or the one after, where
// nothing counts. Within a window fits only becomes true as the previous
// window's weight decays, so sort.Search finds the first microsecond.
func (m *Model) swRetry(prev, cur, e, need int64, fits func(prev, cur, e int64) bool) int64 {
	W := m.window
	left := W - e
	if t := int64(sort.Search(int(left), func(t int) bool { return fits(prev, cur, e+int64(t)) })); t < left {
		return t
	}
	if t := int64(sort.Search(int(W), func(t int) bool { return fits(cur, 0, int64(t)) })); t < W {
		return left + t
	}
	return left + W
}
