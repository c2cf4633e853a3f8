package sluice

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// The deny cache remembers refusals: once the store refuses a request for
// a key, later requests for that key are answered locally, without a round
// trip, while the store's answer to them follows from the refusal alone
// (laterRefusal): the same Result the store would give at that
// instant, RetryAfter, Remaining and ResetAfter included, for the same cost
// or, where the algorithm allows it, another one. Otherwise, and once the
// refusal's RetryAfter has passed, the request goes to the store.
//
// Times run from when the refused request was sent, so a local answer never
// refuses later than the store would. What can make the store allow earlier:
//   - a Reset, in any process: on a DeleteNotifier store the cache hears of
//     it (Deleted) and drops the key, and answers only while the store says
//     notices reach it (Watching); a refusal whose request was sent before
//     a notice (or a change of Watching) arrived is not cached after it,
//     since the store may have decided it before the delete (seq). On any
//     other store a Reset by another process is invisible until the
//     refusal's RetryAfter ends, which is why the cache is off there
//     unless asked for (WithDenyCache).
//   - an AllowAll refund: this process's AllowAll clears its entries;
//     another process's refund is not seen (the cache then refuses for at
//     most the refused cost's RetryAfter, as the store did before it).
//   - a limit changed: the limit is the limiter's own (every Op carries its
//     Rule), and a new limiter starts with an empty cache; another
//     process's limiter with another limit only ever takes more.
//
// A policy with CountRejected never uses the cache: refused requests must
// reach the store to be counted.
type denyCache struct {
	rule Rule
	seed maphash.Seed
	// live reports whether the cache may answer: always on a store
	// without notices (the cache was asked for), and while the store's
	// notices reach it on a DeleteNotifier (see Watching).
	live atomic.Bool
	// seq counts the notices (Deleted, Watching) heard: a refusal is
	// cached only when no notice arrived since its request was sent.
	seq atomic.Uint64
	// entries is at least the number of entries in the shards' maps: raised
	// before an insert, lowered after a delete, under the shard's lock. At
	// 0 the cache holds nothing, which get and forgetStale see without
	// hashing the key or taking a lock (a refusal being put meanwhile is
	// ordered after them, as it would be by the shard's lock).
	entries atomic.Int64
	shards  [denyShards]denyShard
}

const (
	denyShards = 32
	// denyMaxPerShard bounds the memory of the cache: past it, refusals are
	// not cached (every request then reaches the store, as without a cache).
	denyMaxPerShard = 4096
	// denySweep bounds the work of one put into a full shard: it looks at
	// this many entries (in the map's random order) for expired ones to
	// drop, never the whole shard, so a flood of refusals of distinct keys
	// costs O(1) per put.
	denySweep = 16
)

type denyShard struct {
	mu sync.RWMutex
	m  map[string]denyEntry
	// ring holds the shard's keys in the order they were added (a key
	// forgotten since may linger, and is dropped when met): a put into a
	// full shard looks at its oldest denySweep keys, dropping the expired
	// ones and rotating the live ones to the end.
	ring       []ringEntry
	head, size int
}

// ringEntry is a key of the ring and when its refusal ended when it was
// added (a live one is rotated without a look into the map).
type ringEntry struct {
	key   string
	until int64
}

// Times in the cache are nanoseconds on the limiter's clock (see
// Limiter.mono): monotonic, and cheaper to read than time.Now.
type denyEntry struct {
	until int64  // when the refusal's RetryAfter ends
	need  int64  // the refused cost (a peek counts as 1)
	res   Result // the store's refusal
	at    int64  // when the refused request was sent
}

// newDenyCache returns an empty cache, answering at once unless watched
// (then only once the store reports Watching(true)).
func newDenyCache(rule Rule, watched bool) *denyCache {
	c := &denyCache{rule: rule, seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = make(map[string]denyEntry)
		c.shards[i].ring = make([]ringEntry, denyMaxPerShard)
	}
	c.live.Store(!watched)
	return c
}

// Deleted implements DeleteWatcher: key's state was deleted (reset) by
// some process. Refusals in flight are not cached after this (seq).
func (c *denyCache) Deleted(key string) {
	c.seq.Add(1)
	c.forget(key)
}

// Watching implements DeleteWatcher. Either way every entry is dropped:
// notices may have been missed before it.
func (c *denyCache) Watching(live bool) {
	if !live {
		c.live.Store(false)
	}
	c.seq.Add(1)
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n := len(sh.m)
		clear(sh.m)
		c.entries.Add(-int64(n))
		sh.head, sh.size = 0, 0
		sh.mu.Unlock()
	}
	if live {
		c.live.Store(true)
	}
}

func (c *denyCache) shard(key string) *denyShard {
	return &c.shards[maphash.String(c.seed, key)%denyShards]
}

// get returns the store's answer to a request of cost for the store key key
// at now, when a cached refusal determines it. It does not allocate.
func (c *denyCache) get(key []byte, cost int64, now int64) (Result, bool) {
	if !c.live.Load() || !c.holds() {
		return Result{}, false
	}
	sh := &c.shards[maphash.Bytes(c.seed, key)%denyShards]
	sh.mu.RLock()
	e, ok := sh.m[string(key)]
	sh.mu.RUnlock()
	if !ok || now >= e.until {
		return Result{}, false
	}
	// The cache's clock is nanoseconds; the store's answers are whole
	// microseconds.
	d := time.Duration(now-e.at) / time.Microsecond * time.Microsecond
	if e.res.Blocked {
		return blockedLater(e.res, d) // a penalty's block refuses any cost
	}
	return laterRefusal(c.rule, e.res, e.need, max(cost, 1), d)
}

// put caches a refusal of cost, decided by a request sent at sent, when
// seq (read before it was sent) is still the cache's: no notice arrived
// since. The check is under the shard's lock, and a notice bumps seq before
// it takes that lock to drop entries, so a refusal that passed the check is
// dropped by the notice that follows.
func (c *denyCache) put(key string, cost int64, res Result, sent int64, seq uint64) {
	if res.RetryAfter <= 0 {
		return
	}
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !c.live.Load() || c.seq.Load() != seq {
		return
	}
	if _, ok := sh.m[key]; !ok {
		for i := 0; i < denySweep && sh.size == len(sh.ring); i++ {
			r := sh.ring[sh.head]
			sh.head = (sh.head + 1) % len(sh.ring)
			sh.size--
			if sent < r.until {
				sh.push(r) // still refused: to the end of the ring
			} else if e, ok := sh.m[r.key]; ok && sent >= e.until {
				delete(sh.m, r.key)
				c.entries.Add(-1)
			}
		}
		if sh.size == len(sh.ring) {
			return // full of live refusals: the store decides this key
		}
		sh.push(ringEntry{key, sent + int64(res.RetryAfter)})
		c.entries.Add(1) // before the entry can be seen
	}
	sh.m[key] = denyEntry{until: sent + int64(res.RetryAfter), need: max(cost, 1), res: res, at: sent}
}

func (sh *denyShard) push(r ringEntry) {
	sh.ring[(sh.head+sh.size)%len(sh.ring)] = r
	sh.size++
}

func (c *denyCache) forget(key string) {
	sh := c.shard(key)
	sh.mu.Lock()
	sh.drop(c, key)
	sh.mu.Unlock()
}

// drop deletes key's entry, if any. sh.mu is held.
func (sh *denyShard) drop(c *denyCache, key string) {
	if _, ok := sh.m[key]; ok {
		delete(sh.m, key)
		c.entries.Add(-1)
	}
}

// holds reports whether the cache may hold an entry (see entries).
func (c *denyCache) holds() bool { return c.entries.Load() > 0 }

// forgetStale drops key's entry, if any, after the store allowed a take on
// it: what the entry implies no longer holds. It takes the write lock only
// when there is an entry.
func (c *denyCache) forgetStale(key string) {
	if !c.holds() {
		return
	}
	sh := c.shard(key)
	sh.mu.RLock()
	_, ok := sh.m[key]
	sh.mu.RUnlock()
	if ok {
		sh.mu.Lock()
		sh.drop(c, key)
		sh.mu.Unlock()
	}
}
