package sluiceprom_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluiceprom"
)

// TestBlocks: sluice_blocks_total counts the blocks a penalty started and
// sluice_blocked_total the refusals of blocked keys, both from zero.
func TestBlocks(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := sluiceprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := sluice.New(memstore.New(), sluice.FixedWindow{Limit: 1, Window: time.Hour}, sluice.WithName("api"), sluice.WithObserver(m),
		sluice.WithPenalty(sluice.Penalty{After: 2, Within: time.Minute, Block: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	m.Limiter("api")
	const blocks, blocked = "sluice_blocks_total{limiter=api}", "sluice_blocked_total{limiter=api}"
	if v := values(t, reg); v[blocks] != 0 || v[blocked] != 0 {
		t.Fatalf("before any decision: %v %v", v[blocks], v[blocked])
	}
	// 1 allowed, 2 refused, 3 refused and blocked, 4 and 5 blocked.
	for range 5 {
		if _, err := l.Allow(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
	}
	v := values(t, reg)
	if v[blocks] != 1 || v[blocked] != 3 || v["sluice_decisions_total{limiter=api,outcome=denied}"] != 4 {
		t.Fatalf("blocks %v, blocked %v, denied %v; want 1, 3, 4", v[blocks], v[blocked], v["sluice_decisions_total{limiter=api,outcome=denied}"])
	}
}
