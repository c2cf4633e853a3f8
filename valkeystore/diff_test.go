package valkeystore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/valkeytest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// differ runs the same operations on memstore and on a Valkey store and
// reports the first Result that differs.
type differ struct {
	t        testing.TB
	mem      *memstore.Store
	vk       sluice.Store
	prefix   string
	receipts map[string][]int64 // of the takes on each key
}

// receipt returns the receipt of one of key's takes (pick chooses which),
// or, when pick is negative or there is none, a time that may match none.
func (d *differ) receipt(key string, pick int, now time.Time) int64 {
	rs := d.receipts[key]
	if pick < 0 || len(rs) == 0 {
		return now.UnixMicro()
	}
	return rs[pick%len(rs)]
}

func (d *differ) step(desc string, op sluice.Op) {
	d.t.Helper()
	if d.receipts == nil {
		d.receipts = map[string][]int64{}
	}
	a, b := []sluice.Op{op}, []sluice.Op{op}
	ctx := context.Background()
	if err := d.mem.Do(ctx, a); err != nil || a[0].Err != nil {
		d.t.Fatalf("%s: memstore: %v %v", desc, err, a[0].Err)
	}
	if err := d.vk.Do(ctx, b); err != nil || b[0].Err != nil {
		d.t.Fatalf("%s: valkeystore: %v %v", desc, err, b[0].Err)
	}
	if a[0].Result != b[0].Result || a[0].Receipt != b[0].Receipt {
		d.t.Fatalf("%s:\nmemstore    %+v receipt %d\nvalkeystore %+v receipt %d", desc, a[0].Result, a[0].Receipt, b[0].Result, b[0].Receipt)
	}
	if op.Cost > 0 && a[0].Result.Allowed {
		d.receipts[op.Key] = append(d.receipts[op.Key], a[0].Receipt)
	}
}

// randomRule returns a valid rule of algorithm alg with small parameters.
func randomRule(rng *rand.Rand, alg int) sluice.Rule {
	limit := int64(1 + rng.IntN(8))
	window := time.Duration(1+rng.IntN(2000)) * time.Millisecond
	if rng.IntN(4) == 0 {
		window = time.Duration(1000+rng.IntN(5000)) * time.Microsecond
	}
	var p sluice.Policy
	switch alg {
	case 0:
		p = sluice.FixedWindow{Limit: limit, Window: window, CountRejected: rng.IntN(2) == 0}
	case 1:
		p = sluice.SlidingLog{Limit: limit, Window: window, CountRejected: rng.IntN(2) == 0}
	case 2:
		p = sluice.SlidingWindow{Limit: limit, Window: window}
	case 3:
		p = sluice.TokenBucket{Capacity: limit, Rate: float64(1+rng.IntN(20)) / float64(1+rng.IntN(3)), Per: window}
	default:
		p = sluice.GCRA{Rate: float64(1 + rng.IntN(20)), Per: window, Burst: limit}
	}
	r, err := p.Rule()
	if err != nil {
		panic(err)
	}
	return r
}

// TestDifferential runs randomized operation sequences under a fake clock
// on memstore and on Valkey: every Result must be identical.
func TestDifferential(t *testing.T) {
	c := valkeytest.Shared(t).Client(t)
	d := &differ{t: t, mem: memstore.New(), vk: newStore(t, c), prefix: sluicetest.Prefix(t)}
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		alg := int(seed % 5)
		rule := randomRule(rng, alg)
		now := sluicetest.Epoch.Add(time.Duration(rng.IntN(1e6)) * time.Microsecond)
		w := rule.Period()
		for i := range 150 {
			key := sluice.Key(d.prefix, fmt.Sprintf("s%d", seed), rule, fmt.Sprint(rng.IntN(3)))
			switch rng.IntN(6) {
			case 0: // stay at the same microsecond
			case 1:
				now = now.Add(time.Microsecond)
			case 2: // to a window edge, or just before it
				edge := now.Truncate(max(rule.Window, time.Millisecond)).Add(max(rule.Window, time.Millisecond))
				now = edge.Add(-time.Duration(rng.IntN(2)) * time.Microsecond)
			default:
				now = now.Add(time.Duration(rng.Int64N(int64(w)*3/2/1000+1)) * time.Microsecond)
			}
			cost := int64(rng.IntN(int(rule.Limit) + 1))
			var receipt int64
			if rng.IntN(8) == 0 {
				cost = -int64(1 + rng.IntN(2)) // a refund
				receipt = d.receipt(key, rng.IntN(8)-1, now)
			}
			d.step(fmt.Sprintf("seed %d op %d (%v, cost %d, receipt %d, at +%v)", seed, i, rule, cost, receipt, now.Sub(sluicetest.Epoch)),
				sluice.Op{Key: key, Rule: rule, Cost: cost, Now: now, Receipt: receipt})
		}
	}
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
		rule := randomRule(rng, int(data[0]%5))
		d := &differ{t: t, mem: mem, vk: vk, prefix: fmt.Sprintf("%s-%d-%d", base, os.Getpid(), run)}
		key := sluice.Key(d.prefix, "f", rule, "k")
		now := sluicetest.Epoch
		for i := 3; i+1 < len(data) && i < 3+2*200; i += 2 {
			cost := int64(data[i]%byte(rule.Limit+2)) - 1 // -1 .. limit
			now = now.Add(time.Duration(data[i+1]) * time.Duration(data[i+1]) * 37 * time.Microsecond)
			var receipt int64
			if cost < 0 {
				receipt = d.receipt(key, int(data[i]/16)-1, now)
			}
			d.step(fmt.Sprintf("op %d (%v, cost %d, receipt %d, at +%v)", i, rule, cost, receipt, now.Sub(sluicetest.Epoch)),
				sluice.Op{Key: key, Rule: rule, Cost: cost, Now: now, Receipt: receipt})
		}
	})
}

// TestDifferentialBatches sends random batches in which keys repeat (a hot
// key's queued requests, decided in one script call) to both stores: every
// Result must match memstore's, which decides a batch one Op at a time.
func TestDifferentialBatches(t *testing.T) {
	c := valkeytest.Shared(t).Client(t)
	mem, vk := memstore.New(), newStore(t, c)
	prefix := sluicetest.Prefix(t)
	ctx := context.Background()
	rules := map[string]sluice.Rule{}
	receipts := map[string][]int64{} // of the takes on each key
	defer func() {
		// Keys written once at the end of a call still expire in time.
		ttls, err := valkeytest.TTLs(ctx, c, prefix+":*")
		if err != nil {
			t.Fatal(err)
		}
		for k, ttl := range ttls {
			name := strings.SplitN(strings.TrimPrefix(k, prefix+":"), ":", 2)[0]
			if bound := sluicetest.TTLBound(rules[name]); ttl != valkeytest.Gone && (ttl <= 0 || ttl > bound) {
				t.Errorf("key %s has TTL %v, want in (0, %v]", k, ttl, bound)
			}
		}
	}()
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 11))
		rule := randomRule(rng, int(seed%5))
		rules[fmt.Sprintf("s%d", seed)] = rule
		now := sluicetest.Epoch
		for round := range 20 {
			now = now.Add(time.Duration(rng.Int64N(int64(rule.Period())/1000+1)) * time.Microsecond)
			batch := make([]sluice.Op, 1+rng.IntN(12))
			for i := range batch {
				cost := int64(rng.IntN(int(rule.Limit) + 1))
				key := sluice.Key(prefix, fmt.Sprintf("s%d", seed), rule, fmt.Sprint(rng.IntN(2)))
				batch[i] = sluice.Op{Key: key, Rule: rule, Cost: cost, Now: now}
				if rs := receipts[key]; rng.IntN(8) == 0 && len(rs) > 0 {
					batch[i].Cost, batch[i].Receipt = -1, rs[rng.IntN(len(rs))]
				}
			}
			a := append([]sluice.Op(nil), batch...)
			b := append([]sluice.Op(nil), batch...)
			if err := mem.Do(ctx, a); err != nil {
				t.Fatal(err)
			}
			if err := vk.Do(ctx, b); err != nil {
				t.Fatal(err)
			}
			for i := range batch {
				if a[i].Cost > 0 && a[i].Result.Allowed {
					receipts[a[i].Key] = append(receipts[a[i].Key], a[i].Receipt)
				}
				if a[i].Err != nil || b[i].Err != nil || a[i].Result != b[i].Result || a[i].Receipt != b[i].Receipt {
					t.Fatalf("seed %d round %d op %d (%v, cost %d, key %s):\nmemstore    %+v %v\nvalkeystore %+v %v",
						seed, round, i, rule, batch[i].Cost, batch[i].Key, a[i].Result, a[i].Err, b[i].Result, b[i].Err)
				}
			}
		}
	}
}
