package memstore_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestInFlight: see sluicetest.RunInFlight.
func TestInFlight(t *testing.T) {
	s := memstore.New()
	sluicetest.RunInFlight(t, sluicetest.Harness{
		Store: s,
		TTLs:  func(t testing.TB, prefix string) map[string]time.Duration { return s.TTLs(prefix) },
	})
}
