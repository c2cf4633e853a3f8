package valkeystore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// Probe is what a test injects into a Store and observes of it.
type Probe = probe

// WithProbe injects p into the Store.
func WithProbe(p *Probe) Option {
	return optionFunc(func(e *engine) { e.probe = p })
}

// SkewedDo decides ops on s, a Store with a probe, with calendar bounds
// computed as if this host's clock were skew ahead of the server's, and
// returns the first Op's error.
func SkewedDo(t testing.TB, s *Store, ops []driver.Op, skew time.Duration) error {
	t.Helper()
	if s.e.probe == nil {
		t.Fatal("SkewedDo: the Store has no probe (WithProbe)")
	}
	s.e.probe.skew = skew
	defer func() { s.e.probe.skew = 0 }()
	if err := s.Do(context.Background(), ops); err != nil {
		return err
	}
	return ops[0].Err
}

// CrossSplits returns how many cross calls (keys of several slots of one
// node) the Store was split after a refusal that proved they did not run.
func (p *Probe) CrossSplits() int64 { return p.crossSplits.Load() }

// CrossCalls returns how many cross calls the Store sent.
func (p *Probe) CrossCalls() int64 { return p.crossCalls.Load() }

// InFlight returns the calls in flight to each node of s, by name (the
// primary's address on a cluster), and the requests queued on all of them.
func InFlight(s *Store) (map[string]int, int) {
	calls, queued := map[string]int{}, 0
	bud := s.e.budget
	bud.mu.Lock()
	defer bud.mu.Unlock()
	for _, n := range s.e.nodes() {
		calls[n.name] = n.batcher.inflight
		queued += len(n.batcher.pending)
	}
	return calls, queued
}

// GuardedCalls returns how many calls the deadline layer of s ran on a
// goroutine of their own.
func GuardedCalls(s *Store) int64 {
	var n int64
	for _, nd := range s.e.nodes() {
		n += nd.guard.guarded.Load()
	}
	return n
}

// WatchedQueued returns how many requests queued on s wait for their
// context's end through a watch of the batcher's (see watchFor).
func WatchedQueued(s *Store) int {
	bud := s.e.budget
	bud.mu.Lock()
	defer bud.mu.Unlock()
	n := 0
	for _, nd := range s.e.nodes() {
		for _, r := range nd.batcher.pending {
			if r.watch != nil && r.state.Load() == queued {
				n++
			}
		}
	}
	return n
}
