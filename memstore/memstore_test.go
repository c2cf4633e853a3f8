package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
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

// BenchmarkAllow is one decision on the in-memory store, through a limiter
// without the deny cache: most of it is Store.Do.
func BenchmarkAllow(b *testing.B) {
	for _, c := range []struct {
		name string
		pol  sluice.Policy
	}{
		{"gcra", sluice.GCRA{Rate: 1e5, Per: time.Second, Burst: 1e9}},
		{"sliding_window", sluice.SlidingWindow{Limit: 1e12, Window: time.Hour}},
	} {
		l, err := sluice.New(memstore.New(), c.pol, sluice.WithDenyCache(false))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if res, _ := l.Allow(ctx, "k"); !res.Allowed {
					b.Fatal("refused")
				}
			}
		})
	}
}
