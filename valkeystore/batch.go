package valkeystore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// The batcher merges concurrent decisions for one node into shared script
// calls. The batchers of a store's nodes share a budget of calls in flight
// (budget.go); a decision that arrives while its node may not start
// another call queues, and when a call returns, what queued meanwhile
// leaves together as the next call (one EVALSHA deciding many keys, split
// only by algorithm: on a cluster, the node's slots share calls; see
// cross.go). Requests for one hot key that queue together are decided in
// one script call, one after the other, exactly as if they had come one by
// one.
//
// No goroutine is started: the caller whose call returns hands the slot to
// one of the queued callers (of its node, or of another node; see
// budget.go), which sends its node's queue and wakes the others.
//
// Invariants:
//   - A lone decision never waits: a node without a call in flight
//     starts one at once, whatever the other nodes use of the budget.
//   - Every caller returns by its own deadline (the earliest of its Ops'
//     Deadlines and its ctx's), whatever the calls in flight do: a merged
//     call is bounded by the earliest deadline among its requests (and the
//     deadline layer, deadline.go, returns it by then); a queued request
//     whose deadline passes is failed when its queue is sent, or by a
//     timer of its own when it may wait for a call that outlives its
//     deadline (armed when it queues behind such a call, or when such a
//     call leaves without it). A queued request is always sent by the end
//     of its node's last call in flight: the slot of a node's last call
//     stays with the node while it has requests queued.
//   - A decision's own deadline decides it: requests are merged only with
//     requests whose deadlines are close to theirs (within an eighth of
//     the time left), so a decision with a long timeout is never cut short
//     by a merged call bounded by a much shorter one. Requests without a
//     deadline merge only with each other.
//   - A caller that gives up (its ctx ends) while queued is never sent;
//     once sent, it waits for the reply, which the call may already have
//     acted on.
//   - A dead node's calls never starve a healthy node: each node keeps one
//     call in flight of its own, and a hung call frees its slot by its
//     deadline (budget.go).
type batcher struct {
	n      *node
	bud    *budget // the store's; its mu guards the fields below
	maxOps int     // decisions per merged batch

	inflight int       // this node's calls in flight
	latest   time.Time // the latest deadline of the calls in flight
	pending  []*request
	queued   int // the decisions in pending (given-up ones until dropped)
}

// A request is one caller's Do waiting in the queue.
type request struct {
	ops      []driver.Op // a copy: the caller may give up and return
	deadline time.Time   // the earliest of the ops' deadlines; zero: none
	state    atomic.Int32
	rearmed  bool          // a rearm was sent (under budget.mu)
	wake     chan wakeCall // a batch to send (the caller leads it), done, or rearm
}

// wakeCall is what a queued caller is woken for.
type wakeCall struct {
	batch []*request // non-nil: lead this batch
	rearm bool       // arm a timer for the deadline and go on waiting
}

const (
	queued int32 = iota
	taken
	abandoned
)

// never stands for "no deadline" among the calls in flight.
var never = time.Unix(1<<62, 0)

// Room for a rearm and the final wake, so that neither send blocks.
var requestPool = sync.Pool{New: func() any { return &request{wake: make(chan wakeCall, 2)} }}

func newBatcher(e *engine, n *node) *batcher {
	return &batcher{n: n, bud: e.budget, maxOps: 16 * e.maxBatch}
}

// earliest returns the earliest deadline of ops, or the zero Time.
func earliest(ops []driver.Op) time.Time {
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

func (b *batcher) do(ctx context.Context, ops []driver.Op) error {
	dl := earliest(ops)
	if d, ok := ctx.Deadline(); ok && (dl.IsZero() || d.Before(dl)) {
		dl = d // the caller's own deadline bounds the merged call too
	}
	bud := b.bud
	bud.mu.Lock()
	if b.inflight == 0 {
		b.start(dl)
		bud.mu.Unlock()
		err := b.n.doBy(ctx, ops, dl)
		b.handoff()
		return err
	}
	r := requestPool.Get().(*request)
	r.ops = append(r.ops[:0], ops...)
	r.deadline = dl
	r.rearmed = false
	r.state.Store(queued)
	if len(b.pending) == 0 {
		bud.wait(b)
	}
	b.pending = append(b.pending, r)
	b.queued += len(ops)
	// A call beyond the node's first, when the budget allows it now
	// (budget.go): the queue leaves at once, led by its first caller.
	var extra []*request
	if bud.mayStart(b) {
		extra = b.take(time.Now())
	}
	needTimer := !dl.IsZero() && dl.Before(b.latest)
	bud.mu.Unlock()
	if extra != nil {
		extra[0].wake <- wakeCall{batch: extra}
	}

	var (
		timer   *time.Timer
		expired <-chan time.Time
	)
	arm := func() {
		timer = time.NewTimer(time.Until(dl))
		expired = timer.C
	}
	if needTimer {
		arm()
	}
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var batch []*request
wait:
	for {
		select {
		case w := <-r.wake:
			if w.rearm {
				if expired == nil {
					arm()
				}
				continue
			}
			batch = w.batch
			break wait
		case <-ctx.Done():
			if r.state.CompareAndSwap(queued, abandoned) {
				return ctx.Err() // never sent; the sender skips it
			}
			batch = b.final(r) // already sent: wait for the answer
			break wait
		case <-expired:
			if r.state.CompareAndSwap(queued, abandoned) {
				return context.DeadlineExceeded
			}
			batch = b.final(r)
			break wait
		}
	}
	if batch != nil {
		b.lead(batch)
	}
	copy(ops, r.ops)
	r.ops = r.ops[:0]
	requestPool.Put(r)
	return nil
}

// final waits for the wake that ends r's wait (a batch to lead, or done),
// skipping rearms: r was taken into a call.
func (b *batcher) final(r *request) []*request {
	for {
		if w := <-r.wake; !w.rearm {
			return w.batch
		}
	}
}

// start counts a call of b with deadline dl (zero: none) in flight.
// bud.mu is held.
func (b *batcher) start(dl time.Time) {
	b.inflight++
	b.bud.used++
	if orNever(dl).After(b.latest) {
		b.latest = orNever(dl)
	}
}

// handoff frees the slot of a call of b that returned and passes it on:
// to a queued caller of the node that next() chooses (b's, or another
// node's), which leads that node's next batch; or to nobody, when no node
// with requests queued may start a call.
func (b *batcher) handoff() {
	bud := b.bud
	bud.mu.Lock()
	b.inflight--
	bud.used--
	if b.inflight == 0 {
		b.latest = time.Time{}
	}
	for {
		x := bud.next()
		if x == nil {
			bud.mu.Unlock()
			return
		}
		if live := x.take(time.Now()); live != nil {
			bud.mu.Unlock()
			live[0].wake <- wakeCall{batch: live} // the slot passes to the leader
			return
		}
	}
}

// take removes the next batch from b's queue and counts it in flight: the
// first live request in the queue and the requests after it whose
// deadlines are close to its own (mergeable); the others stay queued, in
// order, for the next call. Requests whose deadlines passed are failed on
// the way. It returns nil when no live request was queued. bud.mu is held.
func (b *batcher) take(now time.Time) []*request {
	var (
		live     []*request
		anchor   time.Time // the deadline of the batch's first request
		anchored bool
		dl       time.Time // the earliest deadline in the batch
		ops      int
		left     int // the decisions that stay queued
	)
	keep := b.pending[:0] // filtered in place: keep never passes the reader
	for _, r := range b.pending {
		if r.state.Load() != queued {
			continue // its caller gave up
		}
		if !r.deadline.IsZero() && !now.Before(r.deadline) {
			if r.state.CompareAndSwap(queued, taken) {
				for i := range r.ops {
					r.ops[i].Err = context.DeadlineExceeded
				}
				r.wake <- wakeCall{}
			}
			continue
		}
		if ops >= b.maxOps || anchored && !mergeable(anchor, r.deadline, now) {
			keep = append(keep, r)
			left += len(r.ops)
			continue
		}
		if !r.state.CompareAndSwap(queued, taken) {
			continue
		}
		if !anchored {
			anchor, anchored = r.deadline, true
		}
		live = append(live, r)
		ops += len(r.ops)
		if !r.deadline.IsZero() && (dl.IsZero() || r.deadline.Before(dl)) {
			dl = r.deadline
		}
	}
	clear(b.pending[len(keep):])
	b.pending = keep
	b.queued = left
	if len(keep) == 0 {
		b.bud.done(b)
	}
	if len(live) == 0 {
		return nil
	}
	b.start(dl)
	// A request left queued behind a call that outlives its deadline
	// must not wait for that call without a timer of its own.
	for _, r := range keep {
		if !r.rearmed && !r.deadline.IsZero() && r.deadline.Before(orNever(dl)) {
			r.rearmed = true
			r.wake <- wakeCall{rearm: true}
		}
	}
	return live
}

// mergeable reports whether a request with deadline d may share a call
// with one whose deadline is anchor: both without a deadline, or d within
// an eighth of the time left (at least a millisecond) of anchor.
func mergeable(anchor, d, now time.Time) bool {
	if anchor.IsZero() || d.IsZero() {
		return anchor.IsZero() && d.IsZero()
	}
	tol := max(anchor.Sub(now)/8, time.Millisecond)
	diff := d.Sub(anchor)
	return -tol <= diff && diff <= tol
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
	mp := mergedPool.Get().(*[]driver.Op)
	merged := (*mp)[:0]
	for _, r := range batch {
		merged = append(merged, r.ops...)
	}
	err := b.n.doBy(context.Background(), merged, dl)
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
	clear(merged) // drop the keys and errors it points to
	*mp = merged[:0]
	mergedPool.Put(mp)
	for _, r := range batch[1:] {
		r.wake <- wakeCall{}
	}
	b.handoff()
}

// mergedPool holds the Ops of merged calls between calls: the store keeps
// no Op after the call that decided it returns.
var mergedPool = sync.Pool{New: func() any { return new([]driver.Op) }}
