package sluicetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
)

// The differential test: random operation sequences under a fake clock on
// memstore and on the store under test must give identical Results.

// Differ runs the same Ops on memstore and on a store under test and fails
// at the first Result (or receipt) that differs.
type Differ struct {
	t        testing.TB
	mem      *memstore.Store
	st       driver.Store
	receipts map[string][]int64 // of the takes on each key
}

// NewDiffer returns a Differ of st against a fresh memstore.
func NewDiffer(t testing.TB, st driver.Store) *Differ {
	return NewDifferWith(t, memstore.New(), st)
}

// NewDifferWith returns a Differ of st against mem (shared across the
// runs of a fuzz target).
func NewDifferWith(t testing.TB, mem *memstore.Store, st driver.Store) *Differ {
	return &Differ{t: t, mem: mem, st: st, receipts: map[string][]int64{}}
}

// Receipt returns the receipt of one of key's takes (pick chooses which),
// or, when pick is negative or there is none, a time that may match none.
func (d *Differ) Receipt(key string, pick int, now time.Time) int64 {
	rs := d.receipts[key]
	if pick < 0 || len(rs) == 0 {
		return now.UnixMicro()
	}
	return rs[pick%len(rs)]
}

// Step runs op on both stores and compares.
func (d *Differ) Step(desc string, op driver.Op) {
	d.t.Helper()
	a, b := []driver.Op{op}, []driver.Op{op}
	d.do(desc, "memstore", d.mem, a)
	d.do(desc, "store under test", d.st, b)
	if a[0].Result != b[0].Result || a[0].Receipt != b[0].Receipt {
		d.t.Fatalf("%s:\nmemstore         %+v receipt %d\nstore under test %+v receipt %d", desc, a[0].Result, a[0].Receipt, b[0].Result, b[0].Receipt)
	}
	if op.Cost > 0 && a[0].Result.Allowed {
		d.receipts[op.Key] = append(d.receipts[op.Key], a[0].Receipt)
	}
}

// do decides the one Op of ops on the store s, named name in the failure.
func (d *Differ) do(desc, name string, s driver.Store, ops []driver.Op) {
	d.t.Helper()
	if err := s.Do(context.Background(), ops); err != nil || ops[0].Err != nil {
		d.t.Fatalf("%s: %s: %v %v", desc, name, err, ops[0].Err)
	}
}

// RandomRule returns a valid rule of algorithm alg (0 to 4: fixed window,
// sliding log, sliding window, token bucket, GCRA) with small parameters.
func RandomRule(rng *rand.Rand, alg int) sluice.Rule {
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
		p = ratedPolicy(rng, false, limit, window)
	default:
		p = ratedPolicy(rng, true, limit, window)
	}
	return mustRule(p)
}

// ratedPolicy returns a TokenBucket (gcra false) or a GCRA of limit over
// window, its rate drawn from rng.
func ratedPolicy(rng *rand.Rand, gcra bool, limit int64, window time.Duration) sluice.Policy {
	if gcra {
		return sluice.GCRA{Rate: float64(1 + rng.IntN(20)), Per: window, Burst: limit}
	}
	return sluice.TokenBucket{Capacity: limit, Rate: float64(1+rng.IntN(20)) / float64(1+rng.IntN(3)), Per: window}
}

// mustRule returns p's rule; the random policies are valid by
// construction, so an error is a bug of the generator.
func mustRule(p sluice.Policy) sluice.Rule {
	r, err := p.Rule()
	if err != nil {
		panic(err)
	}
	return r
}

// RunDifferential runs randomized operation sequences (costs, peeks,
// refunds, window edges, microsecond steps) under a fake clock on memstore
// and on h.Store: every Result must be identical.
func RunDifferential(t *testing.T, h Harness) {
	d := NewDiffer(t, h.Store)
	prefix := Prefix(t)
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		alg := int(seed % 5)
		rule := RandomRule(rng, alg)
		now := Epoch.Add(time.Duration(rng.IntN(1e6)) * time.Microsecond)
		w := rule.Period()
		for i := range 150 {
			key := driver.Key(prefix, fmt.Sprintf("s%d", seed), rule, fmt.Sprint(rng.IntN(3)))
			now = randomStep(rng, now, rule, w)
			cost, receipt := randomCost(rng, d, key, now, rule)
			d.Step(fmt.Sprintf("seed %d op %d (%v, cost %d, receipt %d, at +%v)", seed, i, rule, cost, receipt, now.Sub(Epoch)),
				driver.Op{Key: key, Rule: rule, Cost: cost, Now: now, Receipt: receipt})
		}
	}
}

// randomStep moves now on at random: not at all, by a microsecond, to a
// window edge or just before it, or by up to one and a half periods w.
func randomStep(rng *rand.Rand, now time.Time, rule sluice.Rule, w time.Duration) time.Time {
	switch rng.IntN(6) {
	case 0: // stay at the same microsecond
		return now
	case 1:
		return now.Add(time.Microsecond)
	case 2: // to a window edge, or just before it
		edge := now.Truncate(max(rule.Window, time.Millisecond)).Add(max(rule.Window, time.Millisecond))
		return edge.Add(-time.Duration(rng.IntN(2)) * time.Microsecond)
	default:
		return now.Add(time.Duration(rng.Int64N(int64(w)*3/2/1000+1)) * time.Microsecond)
	}
}

// randomCost draws a cost up to the rule's limit, and one time in eight
// instead a refund of one or two of a receipt d picks for key.
func randomCost(rng *rand.Rand, d *Differ, key string, now time.Time, rule sluice.Rule) (cost, receipt int64) {
	cost = int64(rng.IntN(int(rule.Limit) + 1))
	if rng.IntN(8) == 0 {
		cost = -int64(1 + rng.IntN(2)) // a refund
		receipt = d.Receipt(key, rng.IntN(8)-1, now)
	}
	return cost, receipt
}

// RunDifferentialBatches sends random batches in which keys repeat (a hot
// key's queued requests, decided together) to memstore and h.Store: every
// Result must match memstore's, which decides a batch one Op at a time.
// With h.TTLs, every key written must then expire within its bound (a
// TTL of -2, PTTL's "no such key", is a key that vanished since the scan).
func RunDifferentialBatches(t *testing.T, h Harness) {
	mem, st := memstore.New(), h.Store
	prefix := Prefix(t)
	ctx := context.Background()
	rules := map[string]sluice.Rule{}
	receipts := map[string][]int64{} // of the takes on each key
	defer checkBatchTTLs(t, h, prefix, rules)
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 11))
		rule := RandomRule(rng, int(seed%5))
		rules[fmt.Sprintf("s%d", seed)] = rule
		now := Epoch
		for round := range 20 {
			now = now.Add(time.Duration(rng.Int64N(int64(rule.Period())/1000+1)) * time.Microsecond)
			batch := randomBatch(rng, prefix, fmt.Sprintf("s%d", seed), rule, now, receipts)
			a, b := doBoth(t, ctx, mem, st, batch)
			for i := range batch {
				noteReceipt(receipts, &a[i])
				if !sameDecision(&a[i], &b[i]) {
					t.Fatalf("seed %d round %d op %d (%v, cost %d, key %s):\nmemstore         %+v %v\nstore under test %+v %v",
						seed, round, i, rule, batch[i].Cost, batch[i].Key, a[i].Result, a[i].Err, b[i].Result, b[i].Err)
				}
			}
		}
	}
}

// doBoth decides copies of batch on memstore (mem) and on the store under
// test (st).
func doBoth(t *testing.T, ctx context.Context, mem, st driver.Store, batch []driver.Op) (a, b []driver.Op) {
	t.Helper()
	a = append([]driver.Op(nil), batch...)
	b = append([]driver.Op(nil), batch...)
	if err := mem.Do(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := st.Do(ctx, b); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// noteReceipt keeps the receipt of op when it took.
func noteReceipt(receipts map[string][]int64, op *driver.Op) {
	if op.Cost > 0 && op.Result.Allowed {
		receipts[op.Key] = append(receipts[op.Key], op.Receipt)
	}
}

// sameDecision reports whether a and b were decided alike, without error.
func sameDecision(a, b *driver.Op) bool {
	return a.Err == nil && b.Err == nil && a.Result == b.Result && a.Receipt == b.Receipt
}

// checkBatchTTLs checks, when the harness can read TTLs, that every key
// written under prefix expires within the bound of its rule (rules is
// keyed by the limiter name in the key). A TTL of -2, PTTL's "no such
// key", is a key that vanished since the scan.
func checkBatchTTLs(t *testing.T, h Harness, prefix string, rules map[string]sluice.Rule) {
	if h.TTLs == nil {
		return
	}
	for k, ttl := range h.TTLs(t, prefix+":") {
		name := strings.SplitN(strings.TrimPrefix(k, prefix+":"), ":", 2)[0]
		if bound := TTLBound(rules[name]); ttl != -2 && (ttl <= 0 || ttl > bound) {
			t.Errorf("key %s has TTL %v, want in (0, %v]", k, ttl, bound)
		}
	}
}

// randomBatch draws a batch of 1 to 12 Ops at now on limiter name's two
// keys (so keys repeat): random costs up to the rule's limit, and about
// one in eight a refund of a receipt taken earlier on that key.
func randomBatch(rng *rand.Rand, prefix, name string, rule sluice.Rule, now time.Time, receipts map[string][]int64) []driver.Op {
	batch := make([]driver.Op, 1+rng.IntN(12))
	for i := range batch {
		cost := int64(rng.IntN(int(rule.Limit) + 1))
		key := driver.Key(prefix, name, rule, fmt.Sprint(rng.IntN(2)))
		batch[i] = driver.Op{Key: key, Rule: rule, Cost: cost, Now: now}
		if rs := receipts[key]; rng.IntN(8) == 0 && len(rs) > 0 {
			batch[i].Cost, batch[i].Receipt = -1, rs[rng.IntN(len(rs))]
		}
	}
	return batch
}
