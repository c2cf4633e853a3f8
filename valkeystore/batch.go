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
// No goroutine is started for a call: the caller whose call returns hands
// the slot to one of the queued callers (of its node, or of another node;
// see budget.go), which sends its node's queue and wakes the others. The
// one goroutine a batcher may have watches a context that its queued
// requests share (see ctxWatch).
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

	watch    *ctxWatch       // see watchFor
	lastDone <-chan struct{} // the Done of the latest context queued
	sameDone int             // how many queued in a row shared it
}

// A ctxWatch is a goroutine watching the end of a context that many queued
// requests share (a server's, rather than each request's own), so that
// they wait on their wake channel alone, a plain receive instead of a
// select that every waiter registers on the context's one channel with:
// when the context ends, the goroutine abandons each of them still queued
// and wakes it (gaveUp), as its own select would have.
type ctxWatch struct {
	done   <-chan struct{}
	stop   chan struct{} // closed when another context replaces it
	queued int           // the requests in pending that it watches (bud.mu)
}

// watchAfter is how many requests in a row must share a context before
// its end is watched for them (a context per request never is).
const watchAfter = 16

// A request is one caller's Do waiting in the queue.
type request struct {
	// ops are the caller's own, never copied: while r is queued only its
	// state is read (and len(ops)); the ops are touched only by whoever
	// moves state from queued to taken (sift), and a caller returns without
	// waiting for its wake only after moving it to abandoned, so a caller
	// that gave up and reuses its ops is never raced.
	ops      []driver.Op
	deadline time.Time // the earliest of the ops' deadlines; zero: none
	state    atomic.Int32
	rearmed  bool          // a rearm was sent (under budget.mu)
	watch    *ctxWatch     // the watch of its context's end, or nil: it selects on ctx.Done
	wake     chan wakeCall // a batch to send (the caller leads it), done, rearm or gave up
}

// wakeCall is what a queued caller is woken for.
type wakeCall struct {
	batch  []*request // non-nil: lead this batch
	rearm  bool       // arm a timer for the deadline and go on waiting
	gaveUp bool       // its context ended while queued: abandoned, never sent
}

const (
	queued int32 = iota
	taken
	abandoned
)

// never stands for "no deadline" among the calls in flight.
var never = time.Unix(1<<62, 0)

// Room for a rearm and the final wake (or gave up), so that neither send
// blocks.
var requestPool = sync.Pool{New: func() any { return &request{wake: make(chan wakeCall, 2)} }}

func newBatcher(e *engine, n *node) *batcher {
	return &batcher{n: n, bud: e.budget, maxOps: 16 * e.maxBatch}
}

// earliest returns the earliest deadline of ops, or the zero Time.
func earliest(ops []driver.Op) time.Time {
	var dl time.Time
	for i := range ops {
		dl = earlier(dl, ops[i].Deadline)
	}
	return dl
}

// earlier is the earlier of the deadlines dl and d, where zero is none.
func earlier(dl, d time.Time) time.Time {
	if !d.IsZero() && (dl.IsZero() || d.Before(dl)) {
		return d
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
	if d, ok := ctx.Deadline(); ok {
		dl = earlier(dl, d) // the caller's own deadline bounds the merged call too
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
	r, extra, needTimer := b.enqueue(ctx, ops, dl)
	bud.mu.Unlock()
	if extra != nil {
		extra[0].wake <- wakeCall{batch: extra}
	}
	batch, err := b.wait(ctx, r, dl, needTimer)
	if err != nil {
		return err // never sent; the sender skips it
	}
	if batch != nil {
		b.lead(batch)
	}
	r.ops, r.watch = nil, nil
	requestPool.Put(r)
	return nil
}

// enqueue queues a request for ops with deadline dl, and takes the batch
// of a call beyond the node's first when the budget allows it now
// (budget.go): the queue leaves at once, led by its first caller. It
// reports whether the request needs a timer of its own: its deadline
// comes before the end of the calls in flight. bud.mu is held.
func (b *batcher) enqueue(ctx context.Context, ops []driver.Op, dl time.Time) (r *request, extra []*request, needTimer bool) {
	r = requestPool.Get().(*request)
	r.ops = ops
	r.deadline = dl
	r.rearmed = false
	if r.watch = b.watchFor(ctx); r.watch != nil {
		r.watch.queued++
	}
	r.state.Store(queued)
	if len(b.pending) == 0 {
		b.bud.wait(b)
	}
	b.pending = append(b.pending, r)
	b.queued += len(ops)
	if b.bud.mayStart(b) {
		extra = b.take(time.Now())
	}
	return r, extra, !dl.IsZero() && dl.Before(b.latest)
}

// wait waits for the wake of the queued request r: a batch to lead, or
// none (another caller's call decided r). When r's ctx or deadline (dl,
// with a timer when needTimer or when rearmed) ends first while r is still
// queued, r is abandoned and wait returns the error; a watched ctx's end
// (r.watch) comes as a wake.
func (b *batcher) wait(ctx context.Context, r *request, dl time.Time, needTimer bool) ([]*request, error) {
	var t waitTimer
	if needTimer {
		t.arm(dl)
	}
	defer t.stop()
	done := ctx.Done()
	if r.watch != nil {
		done = nil
	}
	if done == nil && !needTimer {
		// Nothing but the wake can end the wait until a rearm: a plain
		// receive, cheaper than a select.
		if batch, end, err := woken(ctx, <-r.wake, dl, &t); end {
			return batch, err
		}
	}
	for {
		select {
		case w := <-r.wake:
			if batch, end, err := woken(ctx, w, dl, &t); end {
				return batch, err
			}
		case <-done:
			return b.giveUp(ctx, r, ctx.Err())
		case <-t.expired:
			return b.giveUp(ctx, r, context.DeadlineExceeded)
		}
	}
}

// woken takes a wake w of a queued request under ctx: the end of the
// wait, with a batch to lead or none, or with ctx's error when its watch
// abandoned the request (gaveUp); or a rearm, which arms t for dl, and the
// wait goes on.
func woken(ctx context.Context, w wakeCall, dl time.Time, t *waitTimer) (batch []*request, end bool, err error) {
	switch {
	case w.rearm:
		t.arm(dl)
		return nil, false, nil
	case w.gaveUp:
		return nil, true, ctx.Err()
	}
	return w.batch, true, nil
}

// giveUp abandons r with err while it is queued; once sent, it waits for
// the answer (already sent: the call may have acted on it). A watched r
// abandoned by its watch meanwhile returns ctx's error.
func (b *batcher) giveUp(ctx context.Context, r *request, err error) ([]*request, error) {
	if r.state.CompareAndSwap(queued, abandoned) {
		return nil, err
	}
	batch, gaveUp := b.final(r)
	if gaveUp {
		return nil, ctx.Err()
	}
	return batch, nil
}

// waitTimer is the timer of a queued request's deadline, armed once.
type waitTimer struct {
	timer   *time.Timer
	expired <-chan time.Time // nil until armed
}

func (t *waitTimer) arm(dl time.Time) {
	if t.expired == nil {
		t.timer = time.NewTimer(time.Until(dl))
		t.expired = t.timer.C
	}
}

func (t *waitTimer) stop() {
	if t.timer != nil {
		t.timer.Stop()
	}
}

// final waits for the wake that ends r's wait (a batch to lead, or done:
// r was taken into a call; or gaveUp: its watch abandoned it), skipping
// rearms.
func (b *batcher) final(r *request) ([]*request, bool) {
	for {
		if w := <-r.wake; !w.rearm {
			return w.batch, w.gaveUp
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
	bt := b.sift(now)
	if len(b.pending) == 0 {
		b.bud.done(b)
	}
	if len(bt.live) == 0 {
		return nil
	}
	b.start(bt.dl)
	rearmBehind(b.pending, bt.dl)
	return bt.live
}

// sift takes the batch out of b's queue, failing the requests whose
// deadlines passed and dropping the given-up ones; the others stay queued,
// in order. bud.mu is held.
func (b *batcher) sift(now time.Time) batchTake {
	var bt batchTake
	left := 0             // the decisions that stay queued
	keep := b.pending[:0] // filtered in place: keep never passes the reader
	for _, r := range b.pending {
		w := r.watch // read first: place may wake r's caller, which reuses r
		if bt.place(r, now, b.maxOps) {
			keep = append(keep, r)
			left += len(r.ops)
		} else if w != nil {
			w.queued--
		}
	}
	clear(b.pending[len(keep):])
	b.pending = keep
	b.queued = left
	return bt
}

// place takes r, in the queue, into bt, or reports that it stays queued
// (true): the batch is full or r's deadline is not mergeable. A request
// whose caller (or watch) gave up is dropped, one whose deadline passed is
// failed.
func (bt *batchTake) place(r *request, now time.Time, maxOps int) (stays bool) {
	switch {
	case r.state.Load() != queued: // its caller gave up
	case !r.deadline.IsZero() && !now.Before(r.deadline):
		r.failExpired()
	case bt.excludes(r, now, maxOps):
		return true
	case r.state.CompareAndSwap(queued, taken):
		bt.add(r)
	}
	return false
}

// failExpired fails the ops of r, whose deadline passed, unless its caller
// gave up.
func (r *request) failExpired() {
	if r.state.CompareAndSwap(queued, taken) {
		for i := range r.ops {
			r.ops[i].Err = context.DeadlineExceeded
		}
		r.wake <- wakeCall{}
	}
}

// batchTake is the batch take builds: its live requests, the deadline of
// the first (anchor), the earliest deadline and its decisions.
type batchTake struct {
	live     []*request
	anchor   time.Time
	anchored bool
	dl       time.Time
	ops      int
}

// excludes reports whether r stays out of the batch: the batch is full or
// r's deadline is not mergeable with the anchor's.
func (bt *batchTake) excludes(r *request, now time.Time, maxOps int) bool {
	return bt.ops >= maxOps || bt.anchored && !mergeable(bt.anchor, r.deadline, now)
}

func (bt *batchTake) add(r *request) {
	if !bt.anchored {
		bt.anchor, bt.anchored = r.deadline, true
	}
	bt.live = append(bt.live, r)
	bt.ops += len(r.ops)
	bt.dl = earlier(bt.dl, r.deadline)
}

// rearmBehind arms the timer of each request left queued behind a call
// (deadline dl) that outlives its deadline: it must not wait for that call
// without a timer of its own.
func rearmBehind(keep []*request, dl time.Time) {
	for _, r := range keep {
		if !r.rearmed && !r.deadline.IsZero() && r.deadline.Before(orNever(dl)) {
			r.rearmed = true
			r.wake <- wakeCall{rearm: true}
		}
	}
}

// watchFor returns the watch of ctx's end for a request queued under ctx,
// or nil when the request selects on ctx.Done itself: the batcher's watch
// when it watches ctx's Done; a new one when watchAfter requests in a row
// shared ctx's Done and the batcher's watch, if any, has no request queued
// (it is stopped). bud.mu is held.
func (b *batcher) watchFor(ctx context.Context) *ctxWatch {
	done := ctx.Done()
	switch {
	case done == nil:
		return nil
	case b.watch != nil && b.watch.done == done:
		return b.watch
	case done != b.lastDone:
		b.lastDone, b.sameDone = done, 1
		return nil
	}
	if b.sameDone++; b.sameDone < watchAfter || b.watch != nil && b.watch.queued > 0 {
		return nil
	}
	if b.watch != nil {
		close(b.watch.stop)
	}
	b.sameDone = 0
	b.watch = &ctxWatch{done: done, stop: make(chan struct{})}
	go b.watchCtx(b.watch)
	return b.watch
}

// watchCtx waits for the end of w's context, then abandons every request
// it watches that is still queued and wakes it (gaveUp); or for w to be
// replaced (stop), or the store to be gone.
func (b *batcher) watchCtx(w *ctxWatch) {
	select {
	case <-w.done:
	case <-w.stop:
		return
	case <-b.n.e.done:
		return
	}
	b.bud.mu.Lock()
	defer b.bud.mu.Unlock()
	if b.watch == w {
		b.watch = nil
	}
	for _, r := range b.pending {
		if r.watch == w && r.state.CompareAndSwap(queued, abandoned) {
			r.wake <- wakeCall{gaveUp: true}
		}
	}
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
	mp := mergedPool.Get().(*[]driver.Op)
	merged, dl := mergeOps((*mp)[:0], batch)
	err := b.n.doBy(context.Background(), merged, dl)
	spread(merged, batch, err)
	clear(merged) // drop the keys and errors it points to
	*mp = merged[:0]
	mergedPool.Put(mp)
	for _, r := range batch[1:] {
		r.wake <- wakeCall{}
	}
	b.handoff()
}

// mergeOps appends the ops of batch to merged, and returns it with the
// earliest of the requests' deadlines (theirs and their callers').
func mergeOps(merged []driver.Op, batch []*request) ([]driver.Op, time.Time) {
	var dl time.Time
	for _, r := range batch {
		merged = append(merged, r.ops...)
		dl = earlier(dl, r.deadline)
	}
	return merged, dl
}

// spread copies what the store filled in of the decided merged ops
// (Result, Receipt, Err: nothing else of an Op is the store's to change)
// back to batch's requests, with the call's error err where an op has
// none of its own.
func spread(merged []driver.Op, batch []*request, err error) {
	i := 0
	for _, r := range batch {
		for j := range r.ops {
			op, m := &r.ops[j], &merged[i]
			op.Result, op.Receipt, op.Err = m.Result, m.Receipt, m.Err
			if op.Err == nil && err != nil {
				op.Err = err
			}
			i++
		}
	}
}

// mergedPool holds the Ops of merged calls between calls: the store keeps
// no Op after the call that decided it returns.
var mergedPool = sync.Pool{New: func() any { return new([]driver.Op) }}
