// Package waiting holds what requests waiting for admission, instead of
// being refused at once, have in common: the waiting places that bound
// how many wait at once ([Places]), and when a refused request decides
// again ([Schedule]). httplimit and grpclimit (Limit.Wait) and sluice
// serve (a policy's wait) wait with it; each validates its own bounds,
// decides, sleeps and counts its outcomes.
package waiting

import "sync"

// Places bounds the requests waiting at once: in total, and per limit and
// key, K naming one limit and one key (such as struct{ limit int; key
// string }). It holds an entry only per K with a waiter, so its memory is
// bounded by the total. NewPlaces makes Places; they are safe for
// concurrent use.
type Places[K comparable] struct {
	mu         sync.Mutex
	total, max int
	perKey     map[K]int
	maxPerKey  int
	// stop is closed by Stop.
	stop     chan struct{}
	stopOnce sync.Once
}

// NewPlaces returns Places of total places in all and perKey per limit and
// key. A bound of 0 or less has no place: the caller applies its defaults
// and refuses what it does not allow before.
func NewPlaces[K comparable](total, perKey int) *Places[K] {
	return &Places[K]{max: total, maxPerKey: perKey, perKey: map[K]int{}, stop: make(chan struct{})}
}

// SetBounds changes the bounds (as NewPlaces takes them); those waiting
// keep their places, and a bound lowered below them admits no one until
// enough have left.
func (p *Places[K]) SetBounds(total, perKey int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.max, p.maxPerKey = total, perKey
}

// Enter takes a waiting place for keys, the distinct limits and keys
// refusing a request, or reports false (taking none) when the total or a
// key's bound is reached. A request that entered leaves with Leave and
// the same keys.
func (p *Places[K]) Enter(keys []K) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.total >= p.max {
		return false
	}
	for _, k := range keys {
		if p.perKey[k] >= p.maxPerKey {
			return false
		}
	}
	p.total++
	for _, k := range keys {
		p.perKey[k]++
	}
	return true
}

// Leave gives back the place Enter took for keys.
func (p *Places[K]) Leave(keys []K) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total--
	for _, k := range keys {
		if p.perKey[k]--; p.perKey[k] <= 0 {
			delete(p.perKey, k)
		}
	}
}

// Waiting returns the number of requests holding a place now.
func (p *Places[K]) Waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

// Keys returns the number of limits and keys with a waiter now: the
// entries Places holds, at most Waiting times the keys of a request.
func (p *Places[K]) Keys() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.perKey)
}

// Stop closes the channel Done returns, once however many call it: a
// server calls it when it shuts down, so that whoever waits is answered
// at once and no one waits any more. Enter still takes places after Stop:
// a waiter asks Stopped before it waits, and sleeps on Done.
func (p *Places[K]) Stop() {
	p.stopOnce.Do(func() { close(p.stop) })
}

// Stopped reports whether Stop was called.
func (p *Places[K]) Stopped() bool {
	select {
	case <-p.stop:
		return true
	default:
		return false
	}
}

// Done returns a channel closed by Stop, for a waiter's sleep to select
// on.
func (p *Places[K]) Done() <-chan struct{} { return p.stop }
