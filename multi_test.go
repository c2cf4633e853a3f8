package sluice_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// TestAllowEachCountsEachCheck: a refusal by one check gives nothing back to
// the others, and a CountRejected window counts its own refused hits.
func TestAllowEachCountsEachCheck(t *testing.T) {
	store := memstore.New()
	wide, _ := sluice.New(store, sluice.FixedWindow{Limit: 10, Window: time.Hour, CountRejected: true}, sluice.WithName("wide"))
	narrow, _ := sluice.New(store, sluice.FixedWindow{Limit: 1, Window: time.Hour, CountRejected: true}, sluice.WithName("narrow"))
	ctx := context.Background()
	checks := []sluice.Check{{Limiter: wide, Key: "k", Cost: 1}, {Limiter: narrow, Key: "k", Cost: 1}}
	want := []struct {
		allowed              bool
		wideLeft, narrowLeft int64
	}{{true, 9, 0}, {false, 8, 0}, {false, 7, 0}}
	for i, w := range want {
		d, err := sluice.AllowEach(ctx, checks)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != w.allowed || d.Results[0].Remaining != w.wideLeft || d.Results[1].Remaining != w.narrowLeft {
			t.Errorf("call %d: allowed=%v remaining %d/%d, want %v %d/%d", i, d.Allowed,
				d.Results[0].Remaining, d.Results[1].Remaining, w.allowed, w.wideLeft, w.narrowLeft)
		}
	}
	// The narrow window counted its refused hits: 3 taken of 1.
	res, _ := narrow.AllowN(ctx, "k", 0)
	if res.Allowed || res.Remaining != 0 {
		t.Errorf("narrow after refusals: %+v", res)
	}
}

// TestAllowAllRemainingAfterRefund: the allowing checks of a refused call
// report what is left once their units are back.
func TestAllowAllRemainingAfterRefund(t *testing.T) {
	store := memstore.New()
	a, _ := sluice.New(store, sluice.FixedWindow{Limit: 5, Window: time.Hour}, sluice.WithName("a"))
	b, _ := sluice.New(store, sluice.FixedWindow{Limit: 1, Window: time.Hour}, sluice.WithName("b"))
	ctx := context.Background()
	checks := []sluice.Check{{Limiter: a, Key: "k", Cost: 2}, {Limiter: b, Key: "k", Cost: 1}}
	if d, _ := sluice.AllowAll(ctx, checks); !d.Allowed || d.Results[0].Remaining != 3 {
		t.Fatalf("first call: %+v", d)
	}
	d, err := sluice.AllowAll(ctx, checks)
	if err != nil || d.Allowed {
		t.Fatalf("second call: %+v %v", d, err)
	}
	if d.Results[0].Remaining != 3 {
		t.Errorf("a reports %d remaining after the refund, want 3", d.Results[0].Remaining)
	}
}
