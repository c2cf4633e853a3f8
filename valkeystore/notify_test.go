package valkeystore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
)

// cachedRefusal waits (up to 5s) until l answers key's refusal from its
// deny cache: the key's state is deleted behind the store's back (a DEL
// that sends no notice), and l still refuses.
func cachedRefusal(t *testing.T, l *sluice.Limiter, prefix string, raw valkey.Client, key string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		l.Allow(ctx, key)
		if res, _ := l.Allow(ctx, key); res.Allowed {
			t.Fatalf("the second request within a burst of 1 was allowed: %+v", res)
		}
		if err := raw.Do(ctx, raw.B().Del().Key(driver.Key(prefix, l.Name(), l.Rule(), key)).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if res, _ := l.Allow(ctx, key); !res.Allowed {
			return // refused with no state in Valkey: from the cache
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the deny cache never answered within 5s: the store's subscription never became live")
}

// allowedWithin polls l until it allows key, and returns how long it took.
func allowedWithin(t *testing.T, l *sluice.Limiter, key string, bound time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < bound {
		if res, _ := l.Allow(context.Background(), key); res.Allowed {
			return time.Since(start)
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("still refused %v after the reset", bound)
	return 0
}

func testResetReachesOtherStore(t *testing.T, c1, c2 valkey.Client) {
	ctx := context.Background()
	p := sluice.GCRA{Rate: 1, Per: time.Hour, Burst: 1}
	// A prefix of its own: no other test's store listens to its notices,
	// so the count of subscriptions reached is this test's.
	prefix := fmt.Sprintf("rl:notice%d", time.Now().UnixNano())
	a, err := sluice.New(newStore(t, c1), p, sluice.WithName("notice-a"), sluice.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	b, err := sluice.New(newStore(t, c2), p, sluice.WithName("notice-a"), sluice.WithPrefix(prefix), sluice.WithDenyCache(false))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"user-1", "user-2", "user-3"} {
		cachedRefusal(t, a, prefix, c2, key)
		// The state is back, and the key refused by the store too.
		a.Allow(ctx, key)
		n, err := b.ResetNotify(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("the reset reached %d subscriptions, want 1 (the other store's)", n)
		}
		d := allowedWithin(t, a, key, 5*time.Second)
		t.Logf("%s: allowed by the other store's limiter %v after the reset returned", key, d)
	}
}

// TestResetReachesOtherStore: a reset through one Store reaches the deny
// cache of a limiter on another Store (another process), standalone and
// on a cluster, where the key's slot and the channel's may be on
// different primaries.
func TestResetReachesOtherStore(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		s := valkeytest.Shared(t)
		testResetReachesOtherStore(t, s.Client(t), s.Client(t))
	})
	t.Run("cluster", func(t *testing.T) {
		c := valkeytest.SharedCluster(t)
		testResetReachesOtherStore(t, c.Client(t), c.Client(t))
	})
}

// TestNoticeSubscriptionKilled: when the subscription's connection is
// killed, whatever was published meanwhile may be lost: the deny cache is
// dropped, and answers again once the store subscribed again.
func TestNoticeSubscriptionKilled(t *testing.T) {
	s := valkeytest.Shared(t)
	c1, raw := s.Client(t), s.Client(t)
	ctx := context.Background()
	a, err := sluice.New(newStore(t, c1), sluice.GCRA{Rate: 1, Per: time.Hour, Burst: 1}, sluice.WithName("notice-kill"))
	if err != nil {
		t.Fatal(err)
	}
	cachedRefusal(t, a, sluice.DefaultPrefix, raw, "k")
	// The state is deleted with no notice, and the subscription killed.
	if err := raw.Do(ctx, raw.B().Del().Key(driver.Key(sluice.DefaultPrefix, a.Name(), a.Rule(), "k")).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if n, err := raw.Do(ctx, raw.B().ClientKill().TypePubsub().Build()).AsInt64(); err != nil || n < 1 {
		t.Fatalf("CLIENT KILL TYPE pubsub: %d, %v", n, err)
	}
	d := allowedWithin(t, a, "k", 5*time.Second)
	t.Logf("allowed %v after the subscription was killed", d)
	// Subscribed again: the cache answers again.
	cachedRefusal(t, a, sluice.DefaultPrefix, raw, "k")
}

// BenchmarkReset measures a Limiter.Reset on a standalone server: DEL,
// then the notice's SPUBLISH (a second round trip), with one other Store
// subscribed.
func BenchmarkReset(b *testing.B) {
	s := valkeytest.Shared(b)
	ctx := context.Background()
	p := sluice.GCRA{Rate: 1, Per: time.Hour, Burst: 1}
	l, err := sluice.New(newStore(b, s.Client(b)), p, sluice.WithName("bench-reset"), sluice.WithDenyCache(false))
	if err != nil {
		b.Fatal(err)
	}
	// A watching limiter on another Store: the notice has a subscriber.
	if _, err := sluice.New(newStore(b, s.Client(b)), p, sluice.WithName("bench-reset")); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := l.Reset(ctx, "k"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestNoticeChannelSlotMoved: when the notice channel's slot moves to
// another primary, the subscription is made again there (the server ends
// it with sunsubscribe): the cache is dropped, answers again once
// subscribed, and a reset's notice reaches it.
func TestNoticeChannelSlotMoved(t *testing.T) {
	c := valkeytest.StartCluster(t, 3)
	c1, c2 := c.Client(t), c.Client(t)
	ctx := context.Background()
	p := sluice.GCRA{Rate: 1, Per: time.Hour, Burst: 1}
	a, err := sluice.New(newStore(t, c1), p, sluice.WithName("notice-move"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := sluice.New(newStore(t, c2), p, sluice.WithName("notice-move"), sluice.WithDenyCache(false))
	if err != nil {
		t.Fatal(err)
	}
	cachedRefusal(t, a, sluice.DefaultPrefix, c2, "k")
	slot := valkeytest.Slot("sluice:deletes:{" + sluice.DefaultPrefix + "}")
	from := c.PrimaryOf(slot)
	to := (from + 1) % len(c.Primaries)
	// The state is deleted with no notice, and the channel's slot moved.
	if err := c2.Do(ctx, c2.B().Del().Key(driver.Key(sluice.DefaultPrefix, a.Name(), a.Rule(), "k")).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	c.MoveSlots(t, c.Primaries[from], c.Primaries[to], slot, slot)
	d := allowedWithin(t, a, "k", 5*time.Second)
	t.Logf("allowed %v after the channel's slot moved", d)
	cachedRefusal(t, a, sluice.DefaultPrefix, c2, "k")
	a.Allow(ctx, "k")
	n, err := b.ResetNotify(ctx, "k")
	if err != nil || n != 1 {
		t.Fatalf("reset after the move: reached %d subscriptions, %v; want 1", n, err)
	}
	allowedWithin(t, a, "k", 5*time.Second)
}
