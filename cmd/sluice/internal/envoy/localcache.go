package envoy

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// envoyproxy/ratelimit's local cache (LOCAL_CACHE_SIZE_IN_BYTES): a
// descriptor's counter found over its limit is remembered until its window
// ends, and the descriptor's next hits in that window are refused without
// asking the store (and so not counted there), as upstream's does. Its
// statistics are upstream's: ratelimit_localcache_hitCount and
// ratelimit_localcache_missCount (every look-up that found, or did not
// find, a remembered counter) and the descriptor's over_limit_with_local_cache
// (hits so refused), under the names upstream's Prometheus mapping leaves
// them (it maps none of them).

// localEntrySize is what one remembered counter is taken to cost, for the
// bound LOCAL_CACHE_SIZE_IN_BYTES sets: its key and expiry in a map.
const localEntrySize = 128

// minLocalCacheBytes is the least size, as upstream's cache (freecache)
// takes 512 KiB for any smaller size.
const minLocalCacheBytes = 512 << 10

type localCache struct {
	mu      sync.Mutex
	entries map[string]time.Time // key: until when it is over
	max     int
	hits    atomic.Uint64
	misses  atomic.Uint64
}

func newLocalCache(bytes int64, reg prometheus.Registerer) *localCache {
	c := &localCache{entries: map[string]time.Time{}, max: int(max(bytes, minLocalCacheBytes) / localEntrySize)}
	gauge := func(name, help string, f func() float64) prometheus.GaugeFunc {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	reg.MustRegister(
		gauge("ratelimit_localcache_hitCount", "Local cache look-ups that found the counter over its limit (LOCAL_CACHE_SIZE_IN_BYTES).",
			func() float64 { return float64(c.hits.Load()) }),
		gauge("ratelimit_localcache_missCount", "Local cache look-ups that did not.",
			func() float64 { return float64(c.misses.Load()) }),
		gauge("ratelimit_localcache_entryCount", "Counters the local cache holds.",
			func() float64 { c.mu.Lock(); defer c.mu.Unlock(); return float64(len(c.entries)) }),
	)
	return c
}

// key names a descriptor's counter in the window now falls in.
func localKey(key string, window time.Duration, now time.Time) string {
	w := int64(window / time.Second)
	if w <= 0 {
		w = 1
	}
	return key + "\x00" + strconv.FormatInt(w, 10) + "\x00" + strconv.FormatInt(now.Unix()/w, 10)
}

// over reports whether key is remembered over its limit at now, counting
// the look-up as a hit or a miss.
func (c *localCache) over(key string, now time.Time) bool {
	c.mu.Lock()
	until, ok := c.entries[key]
	if ok && !now.Before(until) {
		delete(c.entries, key)
		ok = false
	}
	c.mu.Unlock()
	if ok {
		c.hits.Add(1)
	} else {
		c.misses.Add(1)
	}
	return ok
}

// remember notes key over its limit until until. At the bound, an
// expired entry, else any, makes room: constant work per insert.
func (c *localCache) remember(key string, until time.Time, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[key]; !ok && len(c.entries) >= c.max {
		n := 0
		for k, u := range c.entries {
			n++
			if !now.Before(u) || n >= 8 {
				delete(c.entries, k)
				break
			}
		}
	}
	c.entries[key] = until
}
