package valkeystore

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestBudgetNext compares budget.next with a plain model on random states:
// among the batchers with requests queued, those that may start a call
// (none in flight, or the budget not spent and at least full decisions
// queued: 1 on one server, a full call on a cluster of several primaries)
// compete, and the one with the most decisions queued per call in flight
// wins (none in flight: an infinite ratio), the first listed on a tie; nil
// when none may start.
func TestBudgetNext(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 16))
	for range 20000 {
		fullCall, primaries := 1+rng.IntN(40), 1+rng.IntN(3)
		bud := newBudget(1+rng.IntN(6), fullCall)
		bud.primaries(primaries)
		full := 1 // the decisions queued for a call beyond a node's first
		if primaries > 1 {
			full = fullCall
		}
		for range rng.IntN(6) {
			b := &batcher{bud: bud, inflight: rng.IntN(4), queued: 1 + rng.IntN(40)}
			bud.used += b.inflight
			bud.wait(b)
		}
		bud.used += rng.IntN(3) // calls of batchers with nothing queued

		var want *batcher
		best := math.Inf(-1)
		for _, b := range bud.waiting {
			if b.inflight > 0 && (bud.used >= bud.max || b.queued < full) {
				continue
			}
			ratio := math.Inf(1)
			if b.inflight > 0 {
				ratio = float64(b.queued) / float64(b.inflight)
			}
			if want == nil || ratio > best {
				want, best = b, ratio
			}
		}
		if got := bud.next(); got != want {
			t.Fatalf("max %d, used %d, %d primaries, full call %d, waiting %v: next %v, want %v", bud.max, bud.used, primaries, fullCall, states(bud.waiting), state(got), state(want))
		}
	}
}

func states(bs []*batcher) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = state(b)
	}
	return out
}

func state(b *batcher) string {
	if b == nil {
		return "nil"
	}
	return fmt.Sprintf("{inflight %d, queued %d}", b.inflight, b.queued)
}
