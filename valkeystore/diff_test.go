package valkeystore_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/valkeytest"
)

// TestDifferential runs randomized operation sequences under a fake clock
// on memstore and on Valkey: every Result must be identical.
func TestDifferential(t *testing.T) {
	sluicetest.RunDifferential(t, harness(t, valkeytest.Shared(t).Client(t)))
}

// TestDifferentialBatches sends random batches in which keys repeat (a hot
// key's queued requests, decided in one script call) to both stores: every
// Result must match memstore's, and every key must expire in time.
func TestDifferentialBatches(t *testing.T) {
	sluicetest.RunDifferentialBatches(t, harness(t, valkeytest.Shared(t).Client(t)))
}

// FuzzDifferential decodes operation sequences from the fuzzer's bytes and
// runs them on both stores: every Result must be identical.
func FuzzDifferential(f *testing.F) {
	f.Add([]byte{0, 3, 10, 1, 0, 1, 0, 1, 200, 0, 50})
	f.Add([]byte{1, 2, 100, 1, 3, 1, 0, 0, 255, 1, 1})
	f.Add([]byte{2, 5, 7, 2, 1, 3, 90, 1, 0})
	f.Add([]byte{3, 4, 30, 4, 0, 1, 0, 255, 9, 1, 2})
	f.Add([]byte{4, 1, 1, 1, 0, 1, 1, 0, 0})
	c := valkeytest.Shared(f).Client(f)
	vk := newStore(f, c)
	mem := memstore.New()
	base := sluicetest.Prefix(f) // unique per call of FuzzDifferential in this process
	var run int
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 3 {
			return
		}
		run++
		rng := rand.New(rand.NewPCG(uint64(data[0]), uint64(data[1])<<8|uint64(data[2])))
		rule := sluicetest.RandomRule(rng, int(data[0]%5))
		d := sluicetest.NewDifferWith(t, mem, vk)
		key := driver.Key(fmt.Sprintf("%s-%d-%d", base, os.Getpid(), run), "f", rule, "k")
		now := sluicetest.Epoch
		for i := 3; i+1 < len(data) && i < 3+2*200; i += 2 {
			cost := int64(data[i]%byte(rule.Limit+2)) - 1 // -1 .. limit
			now = now.Add(time.Duration(data[i+1]) * time.Duration(data[i+1]) * 37 * time.Microsecond)
			var receipt int64
			if cost < 0 {
				receipt = d.Receipt(key, int(data[i]/16)-1, now)
			}
			d.Step(fmt.Sprintf("op %d (%v, cost %d, receipt %d, at +%v)", i, rule, cost, receipt, now.Sub(sluicetest.Epoch)),
				driver.Op{Key: key, Rule: rule, Cost: cost, Now: now, Receipt: receipt})
		}
	})
}
