package sluicetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
)

// Grants (driver.Granter): a store's grant calls must answer as
// memstore's, the twin of the script, on random timelines, and refuse bad
// input with an error. The guarantee itself (no over-admission by the
// holders together) is tested in package sluice on simulated fleets.

// grantRules are rules that take grants, small enough for a timeline to
// exhaust and refill them.
func grantRules(rng *rand.Rand) []driver.Rule {
	limit := 1 + rng.Int64N(40)
	return []driver.Rule{
		{Algorithm: driver.AlgorithmTokenBucket, Limit: limit, Interval: time.Duration(100+rng.Int64N(5000)) * time.Microsecond},
		{Algorithm: driver.AlgorithmGCRA, Limit: limit, Interval: time.Duration(1+rng.Int64N(3000)) * time.Microsecond},
		{Algorithm: driver.AlgorithmFixedWindow, Limit: limit, Window: time.Duration(1000+rng.Int64N(80_000)) * time.Microsecond},
		{Algorithm: driver.AlgorithmFixedWindow, Limit: limit, Calendar: driver.Calendar{Unit: driver.Day, Zone: time.UTC}},
	}
}

// RunGrantTwins runs timelines random grant calls, several holders on
// several keys, on store and on a memstore, with the same times (the Ops'
// Now, from about a second ahead of this host's clock, so that no key
// expires on either before it would by the Ops' times), and fails at the
// first answer that differs.
func RunGrantTwins(t *testing.T, store driver.Granter, timelines int) {
	t.Helper()
	ctx := context.Background()
	for tl := 0; tl < timelines; tl++ {
		seed := uint64(time.Now().UnixNano())
		rng := rand.New(rand.NewPCG(seed, uint64(tl)))
		twin := memstore.New()
		rules := grantRules(rng)
		prefix := fmt.Sprintf("gtwin%d-%d", seed%1_000_000, tl)
		now := time.Now().Add(time.Second).Truncate(time.Microsecond)
		held := map[string]int64{}
		for step := 0; step < 120; step++ {
			r := rules[rng.IntN(len(rules))]
			id := fmt.Sprintf("k%d", rng.IntN(2))
			op := driver.GrantOp{Key: driver.GrantKey(prefix, "twin", r, id), Rule: r, Life: time.Duration(1+rng.IntN(40)) * time.Millisecond}
			op.Holder[0] = byte(1 + rng.IntN(4))
			hk := op.Key + op.Holder.String()
			op.Unspent = rng.Int64N(held[hk] + 1)
			switch rng.IntN(8) {
			case 0:
				op.Return = true
			case 1:
				op.Reset = true
			default:
				op.Want = rng.Int64N(r.Limit + 1)
				if rng.IntN(3) == 0 {
					op.Need = 1 + rng.Int64N(r.Limit)
					op.Want = max(op.Want, op.Need)
				}
			}
			now = now.Add(time.Duration(rng.Int64N(3000)) * time.Microsecond)
			op.Now = now
			a, b := []driver.GrantOp{op}, []driver.GrantOp{op}
			if err := store.Grant(ctx, a); err != nil {
				t.Fatalf("seed %d: Grant: %v", seed, err)
			}
			if err := twin.Grant(ctx, b); err != nil {
				t.Fatalf("seed %d: memstore Grant: %v", seed, err)
			}
			if a[0].Err != nil || b[0].Err != nil || a[0].Result != b[0].Result {
				t.Fatalf("seed %d timeline %d step %d: %v (%+v): store %+v (err %v), memstore %+v (err %v)",
					seed, tl, step, r, op, a[0].Result, a[0].Err, b[0].Result, b[0].Err)
			}
			held[hk] = a[0].Result.Held
		}
	}
}

// RunGrantInput checks that store refuses, with an error and no panic,
// grant calls it cannot execute: algorithms that take no grants, a zero
// holder, negative or huge amounts, bad lives, an empty key.
func RunGrantInput(t *testing.T, store driver.Granter) {
	t.Helper()
	tb := driver.Rule{Algorithm: driver.AlgorithmTokenBucket, Limit: 10, Interval: time.Millisecond}
	good := driver.GrantOp{Key: driver.GrantKey("gin", "x", tb, "k"), Rule: tb, Holder: driver.HolderID{1}, Want: 1, Life: time.Second}
	bad := map[string]func(op *driver.GrantOp){
		"sliding window": func(op *driver.GrantOp) {
			op.Rule = driver.Rule{Algorithm: driver.AlgorithmSlidingWindow, Limit: 10, Window: time.Second}
		},
		"sliding log": func(op *driver.GrantOp) {
			op.Rule = driver.Rule{Algorithm: driver.AlgorithmSlidingLog, Limit: 10, Window: time.Second}
		},
		"in flight": func(op *driver.GrantOp) {
			op.Rule = driver.Rule{Algorithm: driver.AlgorithmInFlight, Limit: 10, Window: time.Second}
		},
		"count rejected": func(op *driver.GrantOp) {
			op.Rule = driver.Rule{Algorithm: driver.AlgorithmFixedWindow, Limit: 10, Window: time.Second, CountRejected: true}
		},
		"zero holder":   func(op *driver.GrantOp) { op.Holder = driver.HolderID{} },
		"empty key":     func(op *driver.GrantOp) { op.Key = "" },
		"negative want": func(op *driver.GrantOp) { op.Want = -1 },
		"huge want":     func(op *driver.GrantOp) { op.Want = driver.MaxLimit + 1 },
		"negative unspent": func(op *driver.GrantOp) {
			op.Unspent = -5
		},
		"no life":        func(op *driver.GrantOp) { op.Life = 0 },
		"long life":      func(op *driver.GrantOp) { op.Life = 2 * driver.MaxGrantLife },
		"odd life":       func(op *driver.GrantOp) { op.Life = 1500 * time.Microsecond },
		"return and ask": func(op *driver.GrantOp) { op.Return, op.Want = true, 1 },
		"bad rule":       func(op *driver.GrantOp) { op.Rule.Limit = 0 },
		"bad time":       func(op *driver.GrantOp) { op.Now = time.Unix(-1, 0) },
	}
	for name, f := range bad {
		op := good
		f(&op)
		batch := []driver.GrantOp{op}
		if err := store.Grant(context.Background(), batch); err != nil {
			t.Fatalf("%s: Grant: %v", name, err)
		}
		if batch[0].Err == nil {
			t.Errorf("%s: accepted (%+v)", name, batch[0].Result)
		}
	}
	batch := []driver.GrantOp{good}
	if err := store.Grant(context.Background(), batch); err != nil || batch[0].Err != nil || batch[0].Result.Granted != 1 {
		t.Fatalf("a good call: %v, %v, %+v", err, batch[0].Err, batch[0].Result)
	}
}
