package sluice_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

func TestGrantsBasic(t *testing.T) {
	st := memstore.New()
	l, err := sluice.New(st, sluice.TokenBucket{Capacity: 100, Rate: 10, Per: time.Second}, sluice.WithGrants(sluice.GrantOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	allowed := 0
	for i := 0; i < 200; i++ {
		res, err := l.Allow(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			allowed++
		}
	}
	t.Logf("allowed %d, stats %+v", allowed, l.GrantStats())
}
