package redisstore_test

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
)

func TestMain(m *testing.M) { valkeytest.Main(m) }

func newStore(t testing.TB, c redis.UniversalClient) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// client returns a go-redis client made by redis.NewUniversalClient from
// opt, through redisstore.Options, closed in t.Cleanup.
func client(t testing.TB, opt *redis.UniversalOptions) redis.UniversalClient {
	c := redis.NewUniversalClient(redisstore.Options(opt))
	t.Cleanup(func() { c.Close() })
	return c
}

// harness is the conformance harness of a Store on c; TTLs are read with
// valkeytest's client of the same servers.
func harness(t testing.TB, c redis.UniversalClient, ttls valkey.Client) sluicetest.Harness {
	return sluicetest.Harness{
		Store: newStore(t, c),
		TTLs: func(t testing.TB, prefix string) map[string]time.Duration {
			m, err := valkeytest.TTLs(context.Background(), ttls, prefix+"*")
			if err != nil {
				t.Fatal(err)
			}
			// A key that expired between the scan and its PTTL (a loaded
			// machine's slow check of a 300ms window) kept its promise.
			maps.DeleteFunc(m, func(_ string, ttl time.Duration) bool { return ttl == valkeytest.Gone })
			return m
		},
	}
}

func standalone(t *testing.T) (redis.UniversalClient, valkey.Client) {
	v := valkeytest.Shared(t)
	return client(t, &redis.UniversalOptions{Addrs: []string{v.Addr}}), v.Client(t)
}

func cluster(t *testing.T) (redis.UniversalClient, valkey.Client) {
	c := valkeytest.SharedCluster(t)
	return client(t, &redis.UniversalOptions{Addrs: c.Addrs, IsClusterMode: true}), c.Client(t)
}

func TestConformanceStandalone(t *testing.T) {
	c, v := standalone(t)
	if _, ok := c.(*redis.Client); !ok {
		t.Fatalf("NewUniversalClient gave %T, want *redis.Client", c)
	}
	sluicetest.Run(t, harness(t, c, v))
}

func TestConformanceCluster(t *testing.T) {
	c, v := cluster(t)
	if _, ok := c.(*redis.ClusterClient); !ok {
		t.Fatalf("NewUniversalClient gave %T, want *redis.ClusterClient", c)
	}
	sluicetest.Run(t, harness(t, c, v))
}

// TestConformanceSentinel runs the suite through a Sentinel (failover)
// client: the client asks the sentinel for the primary.
func TestConformanceSentinel(t *testing.T) {
	primary := valkeytest.Start(t)
	s := valkeytest.StartSentinels(t, primary, 1, 0)
	c := client(t, &redis.UniversalOptions{Addrs: s.Addrs, MasterName: valkeytest.SentinelMaster})
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("ping through the sentinel: %v", err)
	}
	sluicetest.Run(t, harness(t, c, primary.Client(t)))
}

func TestDifferential(t *testing.T) {
	c, v := standalone(t)
	sluicetest.RunDifferential(t, harness(t, c, v))
}

func TestDifferentialCalendar(t *testing.T) {
	c, v := standalone(t)
	sluicetest.RunDifferentialCalendar(t, harness(t, c, v))
}

func TestDifferentialBatches(t *testing.T) {
	c, v := standalone(t)
	sluicetest.RunDifferentialBatches(t, harness(t, c, v))
}

func TestDifferentialBatchesCluster(t *testing.T) {
	c, v := cluster(t)
	sluicetest.RunDifferentialBatches(t, harness(t, c, v))
}

// TestScriptFlush: scripts lost to SCRIPT FLUSH are sent again in full,
// without an error reaching the caller.
func TestScriptFlush(t *testing.T) {
	v := valkeytest.Start(t)
	c := client(t, &redis.UniversalOptions{Addrs: []string{v.Addr}})
	st := newStore(t, c)
	ctx := context.Background()
	for _, p := range sluicetest.Policies() {
		r, err := p.Rule()
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if err := c.Do(ctx, "SCRIPT", "FLUSH").Err(); err != nil {
				t.Fatal(err)
			}
			ops := []driver.Op{
				{Key: driver.Key("flush", "a", r, "k"), Rule: r, Cost: 1},
				{Key: driver.Key("flush", "a", r, "j"), Rule: r, Cost: 1},
			}
			if err := st.Do(ctx, ops); err != nil || ops[0].Err != nil || ops[1].Err != nil || !ops[0].Result.Allowed {
				t.Fatalf("%v after SCRIPT FLUSH: %v %v %v %+v", r, err, ops[0].Err, ops[1].Err, ops[0].Result)
			}
		}
	}
}

// TestNew refuses what it cannot use safely.
func TestNew(t *testing.T) {
	plain := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer plain.Close()
	if _, err := redisstore.New(plain); !errors.Is(err, redisstore.ErrClient) {
		t.Errorf("client without ContextTimeoutEnabled: %v, want ErrClient", err)
	}
	plainCluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer plainCluster.Close()
	if _, err := redisstore.New(plainCluster); !errors.Is(err, redisstore.ErrClient) {
		t.Errorf("cluster client without ContextTimeoutEnabled: %v, want ErrClient", err)
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true})
	defer ring.Close()
	if _, err := redisstore.New(ring); !errors.Is(err, redisstore.ErrClient) {
		t.Errorf("ring: %v, want ErrClient", err)
	}
	if _, err := redisstore.New(nil); !errors.Is(err, redisstore.ErrClient) {
		t.Errorf("nil: %v, want ErrClient", err)
	}
	var nilClient *redis.Client
	if _, err := redisstore.New(nilClient); !errors.Is(err, redisstore.ErrClient) {
		t.Errorf("typed nil: %v, want ErrClient", err)
	}
	ok := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer ok.Close()
	if _, err := redisstore.New(ok, redisstore.WithMaxKeysPerCall(0)); err == nil {
		t.Error("WithMaxKeysPerCall(0) accepted")
	}
}

// TestFailure: against a server that accepts and never answers, and a
// port where nothing listens, every decision comes within its timeout
// (plus a margin for a loaded machine), decided by the fail mode.
func TestFailure(t *testing.T) {
	for name, addr := range map[string]string{"silent": valkeytest.Blackhole(t), "refused": valkeytest.ClosedAddr(t)} {
		t.Run(name, func(t *testing.T) {
			c := client(t, &redis.UniversalOptions{Addrs: []string{addr}, DialTimeout: time.Second})
			st := newStore(t, c)
			for _, mode := range []sluice.FailMode{sluice.FailOpen, sluice.FailClosed} {
				l, err := sluice.New(st, sluice.GCRA{Rate: 10, Per: time.Second, Burst: 10},
					sluice.WithName("fail"), sluice.WithFailMode(mode), sluice.WithTimeout(50*time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i < 3; i++ {
					start := time.Now()
					res, err := l.Allow(context.Background(), "k")
					took := time.Since(start)
					if err != nil || !res.Degraded || res.Allowed != (mode == sluice.FailOpen) {
						t.Fatalf("%v: %+v %v, want degraded, allowed=%v", mode, res, err, mode == sluice.FailOpen)
					}
					if took > 50*time.Millisecond+time.Second {
						t.Errorf("%v: decided after %v, want within the 50ms timeout (+1s margin)", mode, took)
					}
				}
			}
		})
	}
}

// TestPausedServerCountsOnce: a call that times out while the server is
// stopped (SIGSTOP) is not sent again: once the server continues, the
// decision has been counted at most once.
func TestPausedServerCountsOnce(t *testing.T) {
	v := valkeytest.Start(t)
	c := client(t, &redis.UniversalOptions{Addrs: []string{v.Addr}})
	st := newStore(t, c)
	lim, err := sluice.New(st, sluice.FixedWindow{Limit: 10, Window: time.Hour}, sluice.WithName("once"),
		sluice.WithTimeout(100*time.Millisecond), sluice.WithDenyCache(false))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := lim.Allow(ctx, "k"); err != nil { // connected, script loaded
		t.Fatal(err)
	}
	v.Pause(t)
	res, err := lim.Allow(ctx, "k")
	if err != nil || !res.Degraded {
		t.Fatalf("while paused: %+v %v, want degraded", res, err)
	}
	time.Sleep(300 * time.Millisecond) // time for a retry, were there one
	v.Resume(t)
	lim2, err := sluice.New(st, sluice.FixedWindow{Limit: 10, Window: time.Hour}, sluice.WithName("once"), sluice.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var peek sluice.Result
	deadline := time.Now().Add(10 * time.Second)
	for {
		peek, err = lim2.Peek(ctx, "k")
		if err == nil && !peek.Degraded || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if peek.Degraded || peek.Remaining < 8 {
		t.Errorf("after the pause: remaining %d (%+v), want 8 or 9: the timed-out call ran at most once", peek.Remaining, peek)
	}
}
