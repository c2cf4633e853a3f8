package refmodel_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/refmodel"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
)

// randomPolicy returns a policy of algorithm alg (0-6) with small, odd
// parameters: limits of 1 to 8, windows and intervals with microseconds.
func randomPolicy(rng *rand.Rand, alg int) sluice.Policy {
	limit := 1 + rng.Int64N(8)
	window := time.Duration(1000+rng.Int64N(1_500_000)) * time.Microsecond
	switch alg {
	case 0:
		return sluice.FixedWindow{Limit: limit, Window: window}
	case 1:
		return sluice.FixedWindow{Limit: limit, Window: window, CountRejected: true}
	case 2:
		return sluice.SlidingLog{Limit: limit, Window: window}
	case 3:
		return sluice.SlidingLog{Limit: limit, Window: window, CountRejected: true}
	case 4:
		return sluice.SlidingWindow{Limit: limit, Window: window}
	case 5:
		return sluice.TokenBucket{Capacity: limit, Rate: float64(1+rng.IntN(20)) / float64(1+rng.IntN(3)), Per: window}
	default:
		return sluice.GCRA{Rate: float64(1+rng.IntN(20)) / float64(1+rng.IntN(3)), Per: window, Burst: limit}
	}
}

// take is an allowed request whose units a later refund may give back.
type take struct {
	key           string
	cost, receipt int64
}

// timeline drives one random timeline through a limiter on store and
// through the model, and fails at the first Result that differs in any
// field. store must decide at the Ops' times and expire keys no earlier
// than real time (a fake clock that runs ahead of it changes nothing).
type timeline struct {
	t      *testing.T
	store  driver.Store
	prefix string
	deny   bool
	rng    *rand.Rand
	clock  *sluicetest.Clock
}

func (tl *timeline) run(alg, steps int) {
	t, rng, ctx := tl.t, tl.rng, context.Background()
	pol := randomPolicy(rng, alg)
	opts := []sluice.Option{sluice.WithClock(tl.clock.Now), sluice.WithPrefix(tl.prefix), sluice.WithTimeout(10 * time.Second)}
	// WithDenyCache(true) is refused where the cache never applies.
	r, err := pol.Rule()
	if err != nil {
		t.Fatal(err)
	}
	deny := tl.deny && !r.CountRejected
	l, err := sluice.New(tl.store, pol, append(opts, sluice.WithName("p"), sluice.WithDenyCache(deny))...)
	if err != nil {
		t.Fatal(err)
	}
	// blocker refuses every request after the first, for 100 days: an
	// AllowAll with it refunds the other check.
	blocker, err := sluice.New(tl.store, sluice.SlidingLog{Limit: 1, Window: 100 * 24 * time.Hour}, append(opts, sluice.WithName("blocker"))...)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := blocker.Allow(ctx, "b"); err != nil || !res.Allowed {
		t.Fatalf("blocker: %+v %v", res, err)
	}
	rule := l.Rule()
	m := refmodel.New(rule)
	period := rule.Period()
	var takes []take
	var lastRetry time.Duration
	check := func(what string, got sluice.Result, want refmodel.Result) {
		t.Helper()
		w := sluice.Result{Allowed: want.Allowed, Limit: rule.Limit, Remaining: want.Remaining,
			RetryAfter: time.Duration(want.RetryAfter) * time.Microsecond, ResetAfter: time.Duration(want.ResetAfter) * time.Microsecond}
		if got != w {
			t.Fatalf("%v, deny cache %v, at +%v: %s:\n got  %+v\n want %+v", rule, tl.deny, tl.clock.Now().Sub(sluicetest.Epoch), what, got, w)
		}
		if !got.Allowed {
			lastRetry = got.RetryAfter
		}
	}
	for i := range steps {
		switch rng.IntN(10) {
		case 0: // the same microsecond
		case 1:
			tl.clock.Advance(time.Microsecond)
		case 2: // exactly the last RetryAfter, or a microsecond before it
			if lastRetry > 0 {
				tl.clock.Advance(lastRetry - time.Duration(rng.IntN(2))*time.Microsecond)
				lastRetry = 0
			}
		case 3: // a window edge, or a microsecond either side of it
			now := tl.clock.Now()
			edge := now.Truncate(period).Add(period)
			tl.clock.Advance(edge.Sub(now) + time.Duration(rng.IntN(3)-1)*time.Microsecond)
		default:
			tl.clock.Advance(time.Duration(rng.Int64N(int64(period)*3/2/1000+1)) * time.Microsecond)
		}
		now := tl.clock.Now().UnixMicro()
		k := fmt.Sprint("k", rng.IntN(2))
		cost := rng.Int64N(rule.Limit + 1)
		what := fmt.Sprintf("step %d, key %s, cost %d", i, k, cost)
		switch op := rng.IntN(20); {
		case op < 12: // AllowN, a peek when cost is 0
			got, err := l.AllowN(ctx, k, cost)
			if err != nil {
				t.Fatal(err)
			}
			want, receipt := m.Decide(k, now, cost)
			check("AllowN: "+what, got, want)
			if want.Allowed && cost > 0 {
				takes = append(takes, take{k, cost, receipt})
			}
		case op < 17: // AllowAll with the blocker: taken, then given back
			d, err := sluice.AllowAll(ctx, []sluice.Check{{Limiter: l, Key: k, Cost: cost}, {Limiter: blocker, Key: "b", Cost: 1}})
			if err != nil || d.Allowed || d.Results[1].Allowed {
				t.Fatalf("AllowAll: %+v %v", d, err)
			}
			want, receipt := m.Decide(k, now, cost)
			if want.Allowed && cost > 0 { // the Result reports the state after the refund
				after := m.Refund(k, now, cost, receipt)
				want.Remaining, want.ResetAfter = after.Remaining, after.ResetAfter
			}
			check("AllowAll: "+what, d.Results[0], want)
		case op < 18:
			if err := l.Reset(ctx, k); err != nil {
				t.Fatal(err)
			}
			m.Reset(k)
		default: // a refund of an earlier take, later (the store's contract)
			if len(takes) == 0 || tl.deny {
				continue // a cached refusal cannot see a refund it did not make
			}
			tk := takes[rng.IntN(len(takes))]
			n := 1 + rng.Int64N(tk.cost)
			ops := []driver.Op{{Key: driver.Key(tl.prefix, l.Name(), l.Rule(), tk.key), Rule: rule, Cost: -n, Receipt: tk.receipt, Now: tl.clock.Now()}}
			if err := tl.store.Do(ctx, ops); err != nil || ops[0].Err != nil {
				t.Fatal(err, ops[0].Err)
			}
			s := ops[0].Result
			got := sluice.Result{Allowed: s.Allowed, Limit: rule.Limit, Remaining: s.Remaining, RetryAfter: s.RetryAfter, ResetAfter: s.ResetAfter}
			check(fmt.Sprintf("refund of %d of %+v", n, tk), got, m.Refund(tk.key, now, n, tk.receipt))
		}
	}
}

// noNotices hides a store's delete notices (driver.DeleteNotifier).
type noNotices struct{ driver.Store }

// TestProperty compares memstore and Valkey, with the deny cache on and
// off, with the reference model on random timelines of every algorithm:
// costs, peeks, resets, refunds through AllowAll and later ones, window
// edges, microsecond steps and waits of exactly RetryAfter.
func TestProperty(t *testing.T) {
	c := valkeytest.Shared(t).Client(t)
	vk, err := valkeystore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"memstore", "valkey"} {
		for _, deny := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/deny=%v", target, deny), func(t *testing.T) {
				seeds, steps := 21, 200
				if target == "valkey" {
					seeds, steps = 14, 120
				}
				for seed := range seeds {
					rng := rand.New(rand.NewPCG(uint64(seed), 99))
					clock := sluicetest.NewClock()
					clock.Advance(time.Duration(rng.Int64N(1e9)) * time.Microsecond)
					tl := &timeline{t: t, prefix: fmt.Sprintf("%s-%d", sluicetest.Prefix(t), seed), deny: deny, rng: rng, clock: clock}
					tl.store = vk
					if deny {
						// Without delete notices the cache answers from
						// the first refusal, as it would on Valkey once
						// its subscription is live (each timeline has a
						// prefix, and so a subscription, of its own).
						tl.store = noNotices{vk}
					}
					if target == "memstore" {
						tl.store = memstore.New(memstore.WithClock(clock.Now))
					}
					tl.run(seed%7, steps)
				}
			})
		}
	}
}
