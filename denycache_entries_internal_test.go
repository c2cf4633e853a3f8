package sluice

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// TestDenyCacheEntries runs random puts (some into full shards, some
// expiring), forgets, stale drops, deletes and changes of Watching: after
// each, entries is exactly the entries the shards hold, so an empty cache
// (which get and forgetStale skip) is one that holds nothing, and a cache
// that holds something is never skipped.
func TestDenyCacheEntries(t *testing.T) {
	c := newDenyCache(Rule{Algorithm: driver.AlgorithmGCRA, Limit: 1, Interval: time.Second}, false)
	rng := rand.New(rand.NewPCG(1, 2))
	held := func() int64 {
		n := 0
		for i := range c.shards {
			n += len(c.shards[i].m)
		}
		return int64(n)
	}
	// Full shards first: the puts past them sweep expired entries out.
	now := int64(0)
	for i := range denyShards * denyMaxPerShard * 2 {
		now += 10
		c.put("f"+strconv.Itoa(i), 1, Result{Limit: 1, RetryAfter: 1000}, now, c.seq.Load())
	}
	if got, want := c.entries.Load(), held(); got != want {
		t.Fatalf("after filling: entries %d, the shards hold %d", got, want)
	}
	for i := range 200_000 {
		k := "k" + strconv.Itoa(rng.IntN(denyShards*denyMaxPerShard*3/2))
		switch op := rng.IntN(100); {
		case op < 70:
			now += int64(rng.IntN(1000))
			res := Result{Limit: 1, RetryAfter: time.Duration(1 + rng.IntN(100_000))}
			c.put(k, 1, res, now, c.seq.Load())
		case op < 85:
			c.forgetStale(k)
		case op < 98:
			c.forget(k)
		case op < 99:
			c.Deleted(k)
		default:
			c.Watching(rng.IntN(2) == 0)
			c.Watching(true)
		}
		if got, want := c.entries.Load(), held(); got != want {
			t.Fatalf("after step %d: entries %d, the shards hold %d", i, got, want)
		}
	}
	if held() == 0 {
		t.Fatal("the run never filled the cache")
	}
	c.Watching(true)
	if c.holds() || held() != 0 {
		t.Fatalf("after Watching: entries %d, held %d", c.entries.Load(), held())
	}
	// An entry put is found again, and its drop empties the cache.
	res := Result{Limit: 1, RetryAfter: time.Hour}
	c.put("x", 1, res, now, c.seq.Load())
	if _, ok := c.get([]byte("x"), 1, now+1); !ok || !c.holds() {
		t.Fatal("a cached refusal is not answered")
	}
	c.forgetStale("x")
	if c.holds() {
		t.Fatalf("after its only entry was dropped: entries %d", c.entries.Load())
	}
}
