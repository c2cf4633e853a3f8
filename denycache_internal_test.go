package sluice

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// BenchmarkDenyCachePutFull measures a put of a new key into a cache whose
// shards are full of live refusals: a flood of refused requests for
// distinct keys (an attack) is exactly this. The work per put is bounded
// (denySweep entries looked at), not a rescan of the shard.
func BenchmarkDenyCachePutFull(b *testing.B) {
	c := newDenyCache(Rule{Algorithm: driver.AlgorithmGCRA, Limit: 1, Interval: time.Second}, false)
	res := Result{Limit: 1, RetryAfter: time.Hour, ResetAfter: time.Hour}
	for i := 0; i < denyShards*denyMaxPerShard*2; i++ {
		c.put("live:"+strconv.Itoa(i), 1, res, 0, 0)
	}
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = "new:" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.put(keys[i&(len(keys)-1)], 1, res, 1, 0)
	}
}

// TestDenyCacheBounded: full shards stay at their bound, and a put into a
// full shard still drops expired entries it meets.
func TestDenyCacheBounded(t *testing.T) {
	c := newDenyCache(Rule{Algorithm: driver.AlgorithmGCRA, Limit: 1, Interval: time.Second}, false)
	short := Result{Limit: 1, RetryAfter: time.Millisecond}
	for i := 0; i < denyShards*denyMaxPerShard*2; i++ {
		c.put("k"+strconv.Itoa(i), 1, short, 0, 0)
	}
	for i := range c.shards {
		if n := len(c.shards[i].m); n > denyMaxPerShard {
			t.Fatalf("shard %d holds %d entries, bound %d", i, n, denyMaxPerShard)
		}
	}
	// Every entry has expired at 1ms: new puts find room at once.
	later := int64(2 * time.Millisecond)
	for i := range 1000 {
		k := "n" + strconv.Itoa(i)
		c.put(k, 1, short, later, 0)
		sh := c.shard(k)
		if _, ok := sh.m[k]; !ok {
			t.Fatalf("put %d into a shard of expired entries was dropped", i)
		}
	}
}
