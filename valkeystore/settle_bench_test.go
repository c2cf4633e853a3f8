package valkeystore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
)

// BenchmarkReserveSettle measures a reserve+settle cycle (Reserve of 100
// units, Settle at 80) beside an AllowN of the same cost, in the same run,
// on a real Valkey and on memstore, for the algorithms that keep
// reservations: serial, 1000 keys. The ratio of the two ns/op is the cost
// of a cycle in decisions.
//
//	go test -run '^$' -bench ReserveSettle ./valkeystore
func BenchmarkReserveSettle(b *testing.B) {
	srv := valkeytest.Start(b)
	vs, err := valkeystore.New(srv.Client(b))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "tenant:" + strconv.Itoa(i)
	}
	for _, st := range []struct {
		name  string
		store driver.Store
	}{{"valkey", vs}, {"memstore", memstore.New()}} {
		for _, p := range []sluice.Policy{
			sluice.FixedWindow{Limit: 1 << 40, Window: time.Hour},
			sluice.TokenBucket{Capacity: 1 << 30, Rate: 1e6, Per: time.Second},
			sluice.GCRA{Rate: 1e6, Per: time.Second, Burst: 1 << 30},
		} {
			l, err := sluice.New(st.store, p, sluice.WithTimeout(10*time.Second), sluice.WithDenyCache(false),
				sluice.WithReservations(sluice.ReserveOptions{}))
			if err != nil {
				b.Fatal(err)
			}
			alg := l.Rule().Algorithm.String()
			b.Run(st.name+"/"+alg+"/AllowN", func(b *testing.B) {
				i := 0
				for b.Loop() {
					if _, err := l.AllowN(ctx, keys[i%len(keys)], 100); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
			b.Run(st.name+"/"+alg+"/ReserveSettle", func(b *testing.B) {
				i := 0
				for b.Loop() {
					r, err := l.Reserve(ctx, keys[i%len(keys)], 100)
					if err != nil || !r.Allowed {
						b.Fatal(r, err)
					}
					if _, err := r.Settle(ctx, 80); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
}
