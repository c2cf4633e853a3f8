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

// TestWarnings: sluice_warnings_total counts the allowed decisions that
// crossed the limiter's warning threshold, and starts at zero.
func TestWarnings(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := sluiceprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := sluice.New(memstore.New(), sluice.FixedWindow{Limit: 4, Window: time.Minute},
		sluice.WithName("api"), sluice.WithObserver(m), sluice.WithWarning(75))
	if err != nil {
		t.Fatal(err)
	}
	m.Limiter("api")
	const id = "sluice_warnings_total{limiter=api}"
	if v, ok := values(t, reg)[id]; !ok || v != 0 {
		t.Fatalf("%s = %v (present %v), want 0 before any decision", id, v, ok)
	}
	for range 5 { // 1, 2: no warning; 3, 4: warning; 5: refused
		if _, err := l.Allow(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
	}
	if v := values(t, reg)[id]; v != 2 {
		t.Fatalf("%s = %v, want 2", id, v)
	}
}
