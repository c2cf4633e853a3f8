package simulate

import (
	"container/heap"
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// Simulating in_flight policies: each request an in_flight policy allows
// holds its lease for the hold its source draws, renewing it every third
// of Lease as sluice.Hold does, then releases it; a holder that crashes
// never renews nor releases, and its lease ends Lease after it was
// acquired, by the store's clock.

// checkInFlight refuses what an in_flight policy cannot be simulated
// with: a trace (its requests have no durations), a source without hold=,
// a cost other than 1; and hold= or crash= with no in_flight policy.
func checkInFlight(opts Options) error {
	var inFlight *string
	for _, pol := range opts.Policies {
		if pol.Algorithm == driver.AlgorithmInFlight {
			inFlight = &pol.Name
			break
		}
	}
	if inFlight == nil {
		for _, t := range opts.Traffic {
			if !t.Hold.IsZero() {
				return fmt.Errorf("traffic %q: hold and crash are for in_flight policies, and none is simulated", t.Spec)
			}
		}
		return nil
	}
	if opts.Trace != "" {
		return fmt.Errorf("policy %q is in_flight: a trace's requests have no durations (how long each holds its lease); use --traffic with hold=", *inFlight)
	}
	for _, t := range opts.Traffic {
		switch {
		case t.Hold.IsZero():
			return fmt.Errorf("traffic %q: policy %q is in_flight: give hold= (how long each allowed request holds its lease: 200ms, exp:200ms or 100ms-500ms)", t.Spec, *inFlight)
		case t.Cost != 1:
			return fmt.Errorf("traffic %q: policy %q is in_flight: a request takes one lease, so cost must be 1", t.Spec, *inFlight)
		}
	}
	return nil
}

// leaseSim is a worker's holders of an in_flight policy: the renewals and
// releases to come, and the leases held.
type leaseSim struct {
	w       *worker
	lease   int64 // Lease, µs
	renew   int64 // every third of Lease, µs (at least 1)
	pending pendingHeap
	seq     uint64
	// live counts the leases of holders that have not crashed, released
	// or lost their lease; crashed the ends of crashed holders' leases.
	live    int64
	crashed endHeap
}

func newLeaseSim(w *worker) *leaseSim {
	lease := w.rule.Window.Microseconds()
	return &leaseSim{w: w, lease: lease, renew: max(lease/3, 1)}
}

// pendingOp is a holder's next renewal or release.
type pendingOp struct {
	at      int64 // µs from the start
	seq     uint64
	key     string
	id      driver.LeaseID
	end     int64 // when the holder releases
	release bool
}

// acquire decides ev, an arrival, in bucket b: an allowed one's holder
// then renews and releases (or crashes).
func (ls *leaseSim) acquire(ev event, key string, b int) (driver.Result, error) {
	ls.seq++
	var id driver.LeaseID
	binary.BigEndian.PutUint64(id[8:], ls.seq)
	r, err := ls.w.op(ev.at, driver.Op{Key: key, Rule: ls.w.rule, Cost: 1, Lease: id})
	if err != nil || !r.Allowed {
		return r, err
	}
	bk := &ls.w.res.Buckets[b]
	bk.Peak = max(bk.Peak, ls.w.rule.Limit-r.Remaining)
	if ev.crash {
		ls.w.res.Crashed++
		heap.Push(&ls.crashed, ev.at+ls.lease)
		return r, nil
	}
	ls.live++
	ls.schedule(pendingOp{at: ev.at, key: key, id: id, end: ev.at + ev.hold})
	return r, nil
}

// schedule queues the holder's next step after op.at: a renewal while
// the hold lasts past it, else the release.
func (ls *leaseSim) schedule(op pendingOp) {
	ls.seq++
	op.seq = ls.seq
	if next := op.at + ls.renew; next < op.end {
		op.at = next
	} else {
		op.at, op.release = op.end, true
	}
	heap.Push(&ls.pending, op)
}

// until runs the renewals and releases due before t (at t too when
// inclusive), in time order.
func (ls *leaseSim) until(t int64, inclusive bool) error {
	for len(ls.pending) > 0 {
		op := ls.pending[0]
		if op.at > t || op.at == t && !inclusive {
			return nil
		}
		heap.Pop(&ls.pending)
		if err := ls.step(op); err != nil {
			return err
		}
	}
	return nil
}

// step runs a renewal or a release.
func (ls *leaseSim) step(op pendingOp) error {
	res := ls.w.res
	if op.release {
		r, err := ls.w.op(op.at, driver.Op{Key: op.key, Rule: ls.w.rule, Cost: -1, Lease: op.id})
		if err != nil {
			return err
		}
		ls.live--
		if r.Allowed {
			res.Released++
		} else {
			res.ReleasedEnded++
		}
		return nil
	}
	r, err := ls.w.op(op.at, driver.Op{Key: op.key, Rule: ls.w.rule, Renew: true, Lease: op.id})
	if err != nil {
		return err
	}
	if !r.Allowed {
		ls.live--
		res.RenewalsLost++
		return nil
	}
	ls.schedule(op)
	return nil
}

// closeBucket records, at t, the end of bucket b, the leases held (all
// keys) and those of them held by crashed holders.
func (ls *leaseSim) closeBucket(t int64, b int) {
	for len(ls.crashed) > 0 && ls.crashed[0] <= t {
		heap.Pop(&ls.crashed)
	}
	bk := &ls.w.res.Buckets[b]
	bk.Crashed = int64(len(ls.crashed))
	bk.Held = ls.live + bk.Crashed
}

// op runs one op on the store at at µs from the start.
func (w *worker) op(at int64, op driver.Op) (driver.Result, error) {
	w.now = w.plan.Start.Add(time.Duration(at) * time.Microsecond)
	op.Now = w.now
	w.ops[0] = op
	if err := w.store.Do(context.Background(), w.ops[:]); err != nil {
		return driver.Result{}, err
	}
	if err := w.ops[0].Err; err != nil {
		return driver.Result{}, fmt.Errorf("policy %q: %w", w.pol.Name, err)
	}
	return w.ops[0].Result, nil
}

// pendingHeap orders pending ops by time, then by when they were queued.
type pendingHeap []pendingOp

func (h pendingHeap) Len() int { return len(h) }
func (h pendingHeap) Less(i, j int) bool {
	return h[i].at < h[j].at || h[i].at == h[j].at && h[i].seq < h[j].seq
}
func (h pendingHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pendingHeap) Push(x any)   { *h = append(*h, x.(pendingOp)) }
func (h *pendingHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// endHeap is a min-heap of times.
type endHeap []int64

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
