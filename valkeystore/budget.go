package valkeystore

import "sync"

// The budget of calls in flight. The batchers of one store's nodes
// (batch.go) share one budget of calls in flight (WithBatching), not one
// each: a cluster of N primaries keeps no more calls in flight than one
// server, and the decisions queued behind each call stay many (with the
// same budget per node, each of 3 primaries would see a third of the
// callers behind as many calls, and batches a third as long).
//
// Invariants, on top of the batcher's:
//   - Each node may always have one call in flight of its own, whatever
//     the others use: a lone decision on an idle node never waits, and a
//     node whose calls hang (a dead or paused primary) can take the shared
//     part of the budget but never a healthy node's own call, so the
//     healthy nodes' decisions go on. A hung call gives its slot back when
//     it returns, by its deadline (the deadline layer, deadline.go).
//   - Beyond that first call, a node starts one only within the budget,
//     and, when several primaries share the budget, only for a full call
//     (WithMaxKeysPerCall decisions queued; budget.full). On one server,
//     the calls beyond the first keep it busy while a reply travels and
//     the next call is built, so they start for any queue. On a cluster,
//     the primaries' first calls already overlap, and each extra call on a
//     primary shortens the batches of all its calls: with 128 goroutines
//     on 3 primaries, a fourth call for any queue gave 14-15 decisions per
//     call against one server's 20, one only for a full call 16-18, with
//     no fewer decisions per second (benchmarks/cluster-bench.sh). The
//     extra call then still comes when a primary's queue outgrows what one
//     call carries.
//   - The calls in flight exceed the budget only by the first calls of
//     nodes that started theirs once it was spent (fewer than the nodes),
//     and only until calls return: a slot freed while the budget is
//     overspent goes to nobody, unless it was its node's last call and the
//     node has requests queued. In a steady flow, a cluster of N busy
//     primaries keeps N calls in flight, one each, and up to
//     max(budget, N) while queues of a full call wait.
//   - A slot that frees goes to the node whose queue is longest for the
//     calls it has in flight (decisions queued per call in flight): first
//     the node whose call returned when that was its last (its queue must
//     not wait for anyone), then the longest queue per call within the
//     budget (on a cluster, among the queues of a full call). The work
//     queued, not the order of arrival, decides where the calls go, so the
//     batches are about as long on every node.
//
// One mutex guards the budget and every batcher's queue, so that a slot
// passes between nodes in one step. It is held only to move requests and
// counts, never across a call; a store on one server has one node, and the
// same lock as before.
type budget struct {
	mu      sync.Mutex
	max     int        // calls in flight across the nodes (WithBatching)
	used    int        // calls in flight across the nodes
	waiting []*batcher // the batchers with requests queued

	// full is the decisions a node must have queued to start a call
	// beyond its first: 1 while the store knows at most one primary
	// (standalone, Sentinel, a cluster of one primary), a full call
	// (WithMaxKeysPerCall) when several share the budget; see above.
	full int
	// fullCall is that full call (WithMaxKeysPerCall).
	fullCall int
}

func newBudget(max, maxBatch int) *budget {
	return &budget{max: max, full: 1, fullCall: maxBatch}
}

// primaries tells the budget how many primaries share it (on a cluster,
// those of the slot map just read).
func (bud *budget) primaries(n int) {
	bud.mu.Lock()
	defer bud.mu.Unlock()
	bud.full = 1
	if n > 1 {
		bud.full = bud.fullCall
	}
}

// mayStart reports whether b may start a call now: its first, or one
// within the budget for a queue of at least bud.full decisions. bud.mu is
// held.
func (bud *budget) mayStart(b *batcher) bool {
	return b.inflight == 0 || bud.used < bud.max && b.queued >= bud.full
}

// next returns the batcher a free slot goes to: among those with requests
// queued that may start a call (mayStart), the one with the most decisions queued
// per call in flight (a batcher with none in flight first); nil when
// none may. bud.mu is held.
func (bud *budget) next() *batcher {
	var best *batcher
	for _, x := range bud.waiting {
		if !bud.mayStart(x) {
			continue
		}
		// x.queued/x.inflight > best.queued/best.inflight, without
		// division (an inflight of 0 is an infinite ratio).
		if best == nil || x.queued*best.inflight > best.queued*x.inflight {
			best = x
		}
	}
	return best
}

// wait adds b, whose queue was empty, to the batchers with requests
// queued. bud.mu is held.
func (bud *budget) wait(b *batcher) {
	bud.waiting = append(bud.waiting, b)
}

// done removes b, whose queue is now empty, from the batchers with
// requests queued. bud.mu is held.
func (bud *budget) done(b *batcher) {
	for i, x := range bud.waiting {
		if x == b {
			last := len(bud.waiting) - 1
			bud.waiting[i] = bud.waiting[last]
			bud.waiting[last] = nil
			bud.waiting = bud.waiting[:last]
			return
		}
	}
}
