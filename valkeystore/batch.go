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
// algorithm and cluster slot). A lone decision never waits: when a slot is
// free it goes out at once. Requests for one hot key that queue together
// are decided in one script call, one after the other, exactly as if they
// had come one by one.
//
// No goroutine is started: the caller whose call returns hands the queue to
// one of the queued callers, which sends it and wakes the others.
type batcher struct {
	s      *Store
	max    int // calls in flight at once
	maxOps int // decisions per merged batch

	mu       sync.Mutex
	inflight int
	pending  []*request
}

// A request is one caller's Do waiting in the queue.
type request struct {
	ops      []sluice.Op // a copy: the caller may give up and return
	deadline time.Time   // zero: none
	state    atomic.Int32
	wake     chan []*request // a batch to send (the caller leads it), or nil when done
}

const (
	queued int32 = iota
	taken
	abandoned
)

var requestPool = sync.Pool{New: func() any { return &request{wake: make(chan []*request, 1)} }}

func newBatcher(s *Store, max int) *batcher {
	return &batcher{s: s, max: max, maxOps: 16 * s.maxBatch}
}

func (b *batcher) do(ctx context.Context, ops []sluice.Op) error {
	b.mu.Lock()
	if b.inflight < b.max {
		b.inflight++
		b.mu.Unlock()
		err := b.s.do(ctx, ops)
		b.handoff()
		return err
	}
	r := requestPool.Get().(*request)
	r.ops = append(r.ops[:0], ops...)
	r.deadline, _ = ctx.Deadline()
	r.state.Store(queued)
	b.pending = append(b.pending, r)
	b.mu.Unlock()

	var batch []*request
	select {
	case batch = <-r.wake:
	case <-ctx.Done():
		if r.state.CompareAndSwap(queued, abandoned) {
			return ctx.Err() // never sent; the sender skips it
		}
		batch = <-r.wake // already sent: wait for the answer
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
		b.mu.Unlock()

		live := batch[:0]
		for _, r := range batch {
			if r.state.CompareAndSwap(queued, taken) {
				live = append(live, r)
			}
		}
		if len(live) > 0 {
			live[0].wake <- live // the slot passes to the leader
			return
		}
	}
}

// lead sends batch as one merged Do and wakes its other callers.
func (b *batcher) lead(batch []*request) {
	var deadline time.Time
	n := 0
	for _, r := range batch {
		n += len(r.ops)
		if r.deadline.IsZero() || deadline.IsZero() && r != batch[0] {
			deadline = time.Time{}
		}
		if r.deadline.After(deadline) {
			deadline = r.deadline
		}
	}
	merged := make([]sluice.Op, 0, n)
	for _, r := range batch {
		merged = append(merged, r.ops...)
	}
	ctx := context.Background()
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	err := b.s.do(ctx, merged)
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
