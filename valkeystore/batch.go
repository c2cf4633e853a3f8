package valkeystore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// The batcher merges concurrent decisions into shared script calls. Up to
// max calls are in flight at once; a decision that arrives while all are
// busy queues, and when a call returns, everything queued meanwhile leaves
// together as the next call (one EVALSHA deciding many keys, split only by
// algorithm and, on a cluster, by slot). A lone decision never waits: when a
// slot is free it goes out at once. Requests for one hot key that queue
// together are decided in one script call, one after the other, exactly as
// if they had come one by one.
//
// No goroutine is started: the caller whose call returns hands the queue to
// one of the queued callers, which sends it and wakes the others.
//
// Deadlines travel in the Ops (sluice.Op.Deadline), so a queued decision
// costs no timer: a merged call is bounded by the earliest deadline of its
// decisions, and a queued decision whose deadline passes is failed when the
// queue is handed on. A queued decision only arms a timer of its own when
// a call in flight may outlive its deadline (limiters with different
// timeouts sharing the store).
type batcher struct {
	s      *Store
	max    int // calls in flight at once
	maxOps int // decisions per merged batch

	mu       sync.Mutex
	inflight int
	latest   time.Time // the latest deadline of the calls in flight
	pending  []*request
}

// A request is one caller's Do waiting in the queue.
type request struct {
	ops      []sluice.Op // a copy: the caller may give up and return
	deadline time.Time   // the earliest of the ops' deadlines; zero: none
	state    atomic.Int32
	wake     chan []*request // a batch to send (the caller leads it), or nil when done
}

const (
	queued int32 = iota
	taken
	abandoned
)

// never stands for "no deadline" among the calls in flight.
var never = time.Unix(1<<62, 0)

var requestPool = sync.Pool{New: func() any { return &request{wake: make(chan []*request, 1)} }}

func newBatcher(s *Store, max int) *batcher {
	return &batcher{s: s, max: max, maxOps: 16 * s.maxBatch}
}

// earliest returns the earliest deadline of ops, or the zero Time.
func earliest(ops []sluice.Op) time.Time {
	var dl time.Time
	for i := range ops {
		if d := ops[i].Deadline; !d.IsZero() && (dl.IsZero() || d.Before(dl)) {
			dl = d
		}
	}
	return dl
}

func orNever(dl time.Time) time.Time {
	if dl.IsZero() {
		return never
	}
	return dl
}

func (b *batcher) do(ctx context.Context, ops []sluice.Op) error {
	dl := earliest(ops)
	if d, ok := ctx.Deadline(); ok && (dl.IsZero() || d.Before(dl)) {
		dl = d // the caller's own deadline bounds the merged call too
	}
	b.mu.Lock()
	if b.inflight < b.max {
		b.inflight++
		if orNever(dl).After(b.latest) {
			b.latest = orNever(dl)
		}
		b.mu.Unlock()
		err := b.s.doBy(ctx, ops, dl)
		b.handoff()
		return err
	}
	r := requestPool.Get().(*request)
	r.ops = append(r.ops[:0], ops...)
	r.deadline = dl
	r.state.Store(queued)
	b.pending = append(b.pending, r)
	needTimer := !dl.IsZero() && dl.Before(b.latest)
	b.mu.Unlock()

	var expired <-chan time.Time
	if needTimer {
		t := time.NewTimer(time.Until(dl))
		defer t.Stop()
		expired = t.C
	}
	var batch []*request
	select {
	case batch = <-r.wake:
	case <-ctx.Done():
		if r.state.CompareAndSwap(queued, abandoned) {
			return ctx.Err() // never sent; the sender skips it
		}
		batch = <-r.wake // already sent: wait for the answer
	case <-expired:
		if r.state.CompareAndSwap(queued, abandoned) {
			return context.DeadlineExceeded
		}
		batch = <-r.wake
	}
	if batch != nil {
		b.lead(batch)
	}
	copy(ops, r.ops)
	r.ops = r.ops[:0]
	requestPool.Put(r)
	return nil
}

// handoff gives the queue to one of the queued callers, or frees the slot.
func (b *batcher) handoff() {
	for {
		b.mu.Lock()
		if len(b.pending) == 0 {
			b.inflight--
			if b.inflight == 0 {
				b.latest = time.Time{}
			}
			b.mu.Unlock()
			return
		}
		n, ops := 0, 0
		for n < len(b.pending) && ops < b.maxOps {
			ops += len(b.pending[n].ops)
			n++
		}
		batch := make([]*request, n)
		copy(batch, b.pending)
		rest := copy(b.pending, b.pending[n:])
		clear(b.pending[rest:])
		b.pending = b.pending[:rest]

		now := time.Now()
		live := batch[:0]
		var dl time.Time
		for _, r := range batch {
			if !r.state.CompareAndSwap(queued, taken) {
				continue // its caller gave up
			}
			if !r.deadline.IsZero() && !now.Before(r.deadline) {
				for i := range r.ops {
					r.ops[i].Err = context.DeadlineExceeded
				}
				r.wake <- nil
				continue
			}
			live = append(live, r)
			if !r.deadline.IsZero() && (dl.IsZero() || r.deadline.Before(dl)) {
				dl = r.deadline
			}
		}
		if len(live) > 0 {
			if orNever(dl).After(b.latest) {
				b.latest = orNever(dl)
			}
			b.mu.Unlock()
			live[0].wake <- live // the slot passes to the leader
			return
		}
		b.mu.Unlock()
	}
}

// lead sends batch as one merged Do, by the earliest deadline of its
// decisions, and wakes its other callers.
func (b *batcher) lead(batch []*request) {
	n := 0
	var dl time.Time // the earliest of the requests' deadlines (theirs and their callers')
	for _, r := range batch {
		n += len(r.ops)
		if !r.deadline.IsZero() && (dl.IsZero() || r.deadline.Before(dl)) {
			dl = r.deadline
		}
	}
	merged := make([]sluice.Op, 0, n)
	for _, r := range batch {
		merged = append(merged, r.ops...)
	}
	err := b.s.doBy(context.Background(), merged, dl)
	i := 0
	for _, r := range batch {
		for j := range r.ops {
			r.ops[j] = merged[i]
			if r.ops[j].Err == nil && err != nil {
				r.ops[j].Err = err
			}
			i++
		}
	}
	for _, r := range batch[1:] {
		r.wake <- nil
	}
	b.handoff()
}
