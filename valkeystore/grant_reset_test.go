package valkeystore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
)

// TestGrantResetReachesOtherHolders: two limiters with grants on one key,
// each with its own Store and client (two processes' worth of memory), on
// one real Valkey. Once the key is exhausted, each refuses locally until
// the store could have more (a unit every 12s here). A Reset through one of
// them must reach the other: it admits again within NoticeBound, not when
// its local refusal ends. Fails when the other holder ignores the reset's
// notice (its local refusal then lasts about 12s).
func TestGrantResetReachesOtherHolders(t *testing.T) {
	srv := valkeytest.Shared(t)
	prefix := fmt.Sprintf("grantreset%d", time.Now().UnixNano())
	pol := sluice.TokenBucket{Capacity: 10, Rate: 5, Per: time.Minute}
	mk := func() *sluice.Limiter {
		st := newStore(t, srv.Client(t))
		l, err := sluice.New(st, pol, sluice.WithPrefix(prefix), sluice.WithName("hot"),
			sluice.WithGrants(sluice.GrantOptions{Life: 30 * time.Second}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	a, b := mk(), mk()
	ctx := context.Background()
	time.Sleep(valkeystore.NoticeBound) // both subscribed to the notices
	admitted := 0
	for range 20 {
		for _, l := range []*sluice.Limiter{a, b} {
			res, err := l.Allow(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed {
				admitted++
			}
		}
	}
	if admitted != 10 {
		t.Fatalf("admitted %d of a burst of 10", admitted)
	}
	if res, _ := b.Allow(ctx, "k"); res.Allowed || res.RetryAfter < 5*time.Second {
		t.Fatalf("the exhausted key, before the reset: %+v; want a local refusal of seconds", res)
	}
	n, err := a.ResetNotify(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Fatalf("the reset's notice reached %d subscriptions, want both limiters' stores", n)
	}
	start := time.Now()
	for {
		res, err := b.Allow(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			t.Logf("the other holder admitted %v after the reset", time.Since(start))
			break
		}
		if time.Since(start) > valkeystore.NoticeBound+200*time.Millisecond {
			t.Fatalf("the other holder still refuses %v after the reset (RetryAfter %v): the reset did not reach its local share", time.Since(start), res.RetryAfter)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The reset gave the key its burst back, never more: together the
	// two admit at most the burst (less the units a holder spent since
	// its last grant call, which the store still counts as held).
	admitted = 1
	for range 20 {
		for _, l := range []*sluice.Limiter{a, b} {
			if res, _ := l.Allow(ctx, "k"); res.Allowed {
				admitted++
			}
		}
	}
	if admitted > 10 || admitted < 2 {
		t.Fatalf("after the reset the two admitted %d, want at most the burst of 10", admitted)
	}
}
