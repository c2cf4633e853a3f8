package sluiceprom_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluiceprom"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestLeaseEvents: an in-flight limiter's acquires and refusals are
// decisions; its releases, releases of ended leases, renewals and lost
// renewals are lease events, and so are the leases the store reaped as
// expired.
func TestLeaseEvents(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := sluiceprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	clock := sluicetest.NewClock()
	l, err := sluice.New(memstore.New(), sluice.InFlight{Limit: 1, Lease: time.Minute},
		sluice.WithName("exports"), sluice.WithObserver(m), sluice.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, _, _ := l.Acquire(ctx, "k")
	l.Acquire(ctx, "k") // refused
	a.Renew(ctx)
	a.Release(ctx)
	b, _, _ := l.Acquire(ctx, "k")
	clock.Advance(2 * time.Minute)
	b.Renew(ctx)   // lost: the renewal's decision reaped b, expired
	b.Release(ctx) // ended
	check(t, values(t, reg), map[string]float64{
		"sluice_decisions_total{limiter=exports,outcome=allowed}":   2,
		"sluice_decisions_total{limiter=exports,outcome=denied}":    1,
		"sluice_lease_events_total{event=released,limiter=exports}": 1,
		"sluice_lease_events_total{event=renewed,limiter=exports}":  1,
		"sluice_lease_events_total{event=lost,limiter=exports}":     1,
		"sluice_lease_events_total{event=ended,limiter=exports}":    1,
		"sluice_lease_events_total{event=expired,limiter=exports}":  1,
	})
}
