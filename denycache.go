package sluice

import (
	"hash/maphash"
	"sync"
	"time"
)

// The deny cache remembers refusals: once the store refuses cost n for a key
// with RetryAfter T, every request for that key of cost n or more is
// refused locally, without a round trip, until T has passed.
//
// That is exact for every algorithm: RetryAfter is the earliest time the
// same request could be allowed if nothing else is taken, and other
// requests only take more. The clock starts when the refused request was
// sent, so the local refusal ends no later than the store's would. Three
// things can make the store allow earlier, and the cache does not see them
// from other processes: a Reset (Limiter.Reset clears this process's entry),
// a refund by AllowAll, and a limit changed at runtime. A policy with
// CountRejected never uses the cache: refused requests must reach the store
// to be counted.
type denyCache struct {
	seed   maphash.Seed
	shards [denyShards]denyShard
}

const (
	denyShards = 32
	// denyMaxPerShard bounds the memory of the cache: past it, refusals are
	// not cached (every request then reaches the store, as without a cache).
	denyMaxPerShard = 4096
)

type denyShard struct {
	mu sync.RWMutex
	m  map[string]denyEntry
}

// Times in the cache are nanoseconds on the limiter's clock (see
// Limiter.mono): monotonic, and cheaper to read than time.Now.
type denyEntry struct {
	until int64  // when the store may allow again
	cost  int64  // the smallest refused cost (a peek counts as 1)
	res   Result // the store's refusal
	at    int64  // when the refused request was sent
}

func newDenyCache() *denyCache {
	c := &denyCache{seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = make(map[string]denyEntry)
	}
	return c
}

func (c *denyCache) shard(key string) *denyShard {
	return &c.shards[maphash.String(c.seed, key)%denyShards]
}

// get returns the cached refusal of the store key key for cost at now,
// with its durations brought up to date. It does not allocate.
func (c *denyCache) get(key []byte, cost int64, now int64) (Result, bool) {
	sh := &c.shards[maphash.Bytes(c.seed, key)%denyShards]
	sh.mu.RLock()
	e, ok := sh.m[string(key)]
	sh.mu.RUnlock()
	if !ok || max(cost, 1) < e.cost || now >= e.until {
		return Result{}, false
	}
	res := e.res
	res.RetryAfter = time.Duration(e.until - now)
	res.ResetAfter = max(res.ResetAfter-time.Duration(now-e.at), res.RetryAfter)
	return res, true
}

// put caches a refusal of cost, decided by a request sent at sent.
func (c *denyCache) put(key string, cost int64, res Result, sent int64) {
	if res.RetryAfter <= 0 {
		return
	}
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if len(sh.m) >= denyMaxPerShard {
		for k, e := range sh.m {
			if sent >= e.until {
				delete(sh.m, k)
			}
		}
		if len(sh.m) >= denyMaxPerShard {
			return
		}
	}
	sh.m[key] = denyEntry{until: sent + int64(res.RetryAfter), cost: max(cost, 1), res: res, at: sent}
}

func (c *denyCache) forget(key string) {
	sh := c.shard(key)
	sh.mu.Lock()
	delete(sh.m, key)
	sh.mu.Unlock()
}
