package server

import (
	"container/list"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/envoy"
	"github.com/sluicehq/sluice/driver"
)

// The limiters built for Envoy's per-request limit overrides
// (RateLimitDescriptor.limit). Clients choose the overrides, so the cache
// is bounded: past MaxOverrides distinct ones, the least recently used is
// evicted. An evicted limiter loses nothing: its counts live in the store
// under the descriptor and the window, not in the limiter.

// DefaultMaxOverrides is the default bound of the override cache.
const DefaultMaxOverrides = 1024

// overrideKey identifies an override's limiter: its limit, window and
// counting.
type overrideKey struct {
	limit    int64
	window   time.Duration
	counting config.Counting
}

type overrideCache struct {
	mu    sync.Mutex
	max   int
	ll    *list.List // of *overrideEntry, most recent first
	m     map[overrideKey]*list.Element
	build func(overrideKey) (*policy, error)
	// changed reports the new size after an insert, and whether it evicted.
	changed func(size int, evicted bool)
}

type overrideEntry struct {
	key overrideKey
	p   *policy
}

func newOverrideCache(max int, build func(overrideKey) (*policy, error), changed func(size int, evicted bool)) *overrideCache {
	if max <= 0 {
		max = DefaultMaxOverrides
	}
	return &overrideCache{max: max, ll: list.New(), m: make(map[overrideKey]*list.Element), build: build, changed: changed}
}

// get returns the limiter for k, building it when it is not cached. The
// work per call is constant: one map look-up, at most one build and one
// eviction.
func (c *overrideCache) get(k overrideKey) (*policy, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[k]; e != nil {
		c.ll.MoveToFront(e)
		return e.Value.(*overrideEntry).p, nil
	}
	p, err := c.build(k)
	if err != nil {
		return nil, err
	}
	c.m[k] = c.ll.PushFront(&overrideEntry{key: k, p: p})
	evicted := c.ll.Len() > c.max
	if evicted {
		last := c.ll.Back()
		c.ll.Remove(last)
		delete(c.m, last.Value.(*overrideEntry).key)
	}
	if c.changed != nil {
		c.changed(c.ll.Len(), evicted)
	}
	return p, nil
}

// len returns the number of cached limiters.
func (c *overrideCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}

// buildOverride makes the limiter of an override: an envoyproxy/ratelimit
// window of the given limit, counted under the same names as configured
// limits of that window.
func (s *Server) buildOverride(c *config.Config, k overrideKey) (*policy, error) {
	lim := &config.EnvoyLimit{RequestsPerUnit: k.limit, Window: k.window, Multiplier: 1}
	cfg := &config.Policy{
		Name:       "override",
		Limiter:    config.EnvoyLimiter(k.window),
		Algorithm:  driver.AlgorithmFixedWindow,
		Policy:     config.EnvoyWindow(k.limit, k.window, k.counting),
		Params:     driver.Params{Limit: k.limit, Window: k.window, CountRejected: k.counting != config.CountAllOrNothing},
		Limit:      k.limit,
		Headers:    config.HeadersAll,
		Envoy:      true,
		EnvoyLimit: lim,
	}
	opts := []sluice.Option{
		sluice.WithName(cfg.Limiter), sluice.WithPrefix(c.Prefix), sluice.WithLogger(s.log), sluice.WithObserver(s.obs),
	}
	if c.Valkey != nil && c.Valkey.Timeout > 0 {
		opts = append(opts, sluice.WithTimeout(c.Valkey.Timeout))
	}
	if s.opts.PerSecond != nil && s.opts.PerSecondTimeout > 0 && envoy.PerSecondPolicy(cfg) {
		opts = append(opts, sluice.WithTimeout(s.opts.PerSecondTimeout))
	}
	lim2, err := sluice.New(s.storeOf(cfg), cfg.Policy, opts...)
	if err != nil {
		return nil, err
	}
	// Overrides are never in shadow mode, as in envoyproxy/ratelimit.
	return &policy{cfg: cfg, limiter: lim2, shadow: lim2}, nil
}
