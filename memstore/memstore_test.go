package memstore_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

func TestConformance(t *testing.T) {
	s := memstore.New()
	sluicetest.Run(t, sluicetest.Harness{
		Store: s,
		TTLs: func(t testing.TB, prefix string) map[string]time.Duration {
			return s.TTLs(prefix)
		},
	})
}
