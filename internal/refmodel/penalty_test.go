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

// randomPenalty returns a penalty at the scale of period: 1 to 4
// refusals within up to two periods, blocks of up to a period that grow
// (or not) up to ten times, forgiven after up to three periods.
func randomPenalty(rng *rand.Rand, period time.Duration) sluice.Penalty {
	us := func(upTo time.Duration) time.Duration {
		return time.Duration(1000+rng.Int64N(upTo.Microseconds())) * time.Microsecond
	}
	p := sluice.Penalty{After: 1 + rng.Int64N(4), Within: us(2 * period), Block: us(period)}
	if rng.IntN(3) > 0 {
		p.MaxBlock = p.Block * time.Duration(2+rng.IntN(9))
		p.Forgive = us(3 * period)
	}
	return p
}

// noNoticesPenalties hides a store's delete notices but not its
// penalties.
type noNoticesPenalties struct{ driver.Store }

func (noNoticesPenalties) Penalties() bool { return true }

// penaltyTimeline drives a random timeline through a limiter with a
// penalty and through the model, and fails at the first Result that
// differs in any field.
type penaltyTimeline struct {
	t      *testing.T
	store  driver.Store
	prefix string
	deny   bool
	rng    *rand.Rand
	clock  *sluicetest.Clock
	m      *refmodel.Penalized
	pen    sluice.Penalty
	// what the steps aim at: the last RetryAfter, the end of the last
	// block, the first refusal of the open window
	lastRetry           time.Duration
	lastEnd, firstCount int64
	// seen counts what the timeline met: blocks started, blocked
	// refusals, blocks of level 2 or more (longer than Block)
	seen *[3]int
	keys [2]string
}

func (tl *penaltyTimeline) run(alg, steps int) {
	t, rng, ctx := tl.t, tl.rng, context.Background()
	pol := randomPolicy(rng, alg)
	r, err := pol.Rule()
	if err != nil {
		t.Fatal(err)
	}
	pen := randomPenalty(rng, r.Period())
	tl.pen = pen
	l, err := sluice.New(tl.store, pol, sluice.WithClock(tl.clock.Now), sluice.WithPrefix(tl.prefix), sluice.WithTimeout(10*time.Second),
		sluice.WithName("p"), sluice.WithDenyCache(tl.deny && !r.CountRejected), sluice.WithPenalty(pen))
	if err != nil {
		t.Fatal(err)
	}
	tl.m = refmodel.NewPenalized(refmodel.New(r), refmodel.PenaltyParams{After: pen.After, Within: pen.Within.Microseconds(),
		Block: pen.Block.Microseconds(), MaxBlock: pen.MaxBlock.Microseconds(), Forgive: pen.Forgive.Microseconds()})
	for i := range steps {
		tl.step(pen)
		now := tl.clock.Now().UnixMicro()
		cost := rng.Int64N(r.Limit + 1)
		k := tl.keys[rng.IntN(2)]
		what := fmt.Sprintf("%v %+v, deny cache %v, step %d at +%v, key %s, cost %d", r, pen, tl.deny, i, tl.clock.Now().Sub(sluicetest.Epoch), k, cost)
		switch op := rng.IntN(20); {
		case op < 15:
			got, err := l.AllowN(ctx, k, cost)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := tl.m.Decide(k, now, cost)
			tl.check(what, r, got, want, now)
		case op < 19: // both keys in one call: a cross-slot call on a cluster
			tl.both(ctx, l, r, what, now)
		default:
			if err := l.Reset(ctx, k); err != nil {
				t.Fatal(err)
			}
			tl.m.Reset(k)
		}
	}
}

// both decides k0 and k1 in one AllowAll: a refusal of either gives the
// other's take back.
func (tl *penaltyTimeline) both(ctx context.Context, l *sluice.Limiter, r sluice.Rule, what string, now int64) {
	c0, c1 := tl.rng.Int64N(r.Limit+1), tl.rng.Int64N(r.Limit+1)
	k0, k1 := tl.keys[0], tl.keys[1]
	d, err := sluice.AllowAll(ctx, []sluice.Check{{Limiter: l, Key: k0, Cost: c0}, {Limiter: l, Key: k1, Cost: c1}})
	if err != nil {
		tl.t.Fatal(err)
	}
	w0, rc0 := tl.m.Decide(k0, now, c0)
	w1, rc1 := tl.m.Decide(k1, now, c1)
	if !w0.Allowed || !w1.Allowed {
		for _, x := range []struct {
			w    *refmodel.PenaltyResult
			k    string
			c, r int64
		}{{&w0, k0, c0, rc0}, {&w1, k1, c1, rc1}} {
			if x.w.Allowed && x.c > 0 { // the Result reports the state after the refund
				after := tl.m.Refund(x.k, now, x.c, x.r)
				x.w.Remaining, x.w.ResetAfter = after.Remaining, after.ResetAfter
			}
		}
	}
	tl.check(fmt.Sprintf("AllowAll (%d, %d): %s", c0, c1, what), r, d.Results[0], w0, now)
	tl.check(fmt.Sprintf("AllowAll (%d, %d) k1: %s", c0, c1, what), r, d.Results[1], w1, now)
}

// step moves the clock: not at all, a microsecond, or to an edge (the last
// RetryAfter, the end of the open window, Forgive after the last block
// ended), a microsecond either side of it, or at random.
func (tl *penaltyTimeline) step(pen sluice.Penalty) {
	rng, now := tl.rng, tl.clock.Now().UnixMicro()
	edge := func(at int64) {
		if d := at + int64(rng.IntN(3)-1) - now; d > 0 {
			tl.clock.Advance(time.Duration(d) * time.Microsecond)
		}
	}
	switch rng.IntN(9) {
	case 0:
	case 1:
		tl.clock.Advance(time.Microsecond)
	case 2:
		if tl.lastRetry > 0 {
			tl.clock.Advance(tl.lastRetry - time.Duration(rng.IntN(2))*time.Microsecond)
			tl.lastRetry = 0
		}
	case 3:
		edge(tl.firstCount + pen.Within.Microseconds())
	case 4:
		edge(tl.lastEnd + pen.Forgive.Microseconds())
	default:
		tl.clock.Advance(time.Duration(rng.Int64N(pen.Within.Microseconds()/2+1)) * time.Microsecond)
	}
}

func (tl *penaltyTimeline) check(what string, r sluice.Rule, got sluice.Result, want refmodel.PenaltyResult, now int64) {
	tl.t.Helper()
	w := sluice.Result{Allowed: want.Allowed, Limit: r.Limit, Remaining: want.Remaining, Blocked: want.Blocked, BlockStarted: want.Started,
		RetryAfter: time.Duration(want.RetryAfter) * time.Microsecond, ResetAfter: time.Duration(want.ResetAfter) * time.Microsecond}
	if got != w {
		tl.t.Fatalf("%s:\n got  %+v\n want %+v", what, got, w)
	}
	if !got.Allowed {
		tl.lastRetry = got.RetryAfter
		if tl.firstCount == 0 || now-tl.firstCount > tl.m.P.Within {
			tl.firstCount = now
		}
	}
	if got.BlockStarted {
		tl.lastEnd, tl.firstCount = now+want.RetryAfter, 0
		tl.seen[0]++
		if got.RetryAfter > tl.pen.Block {
			tl.seen[2]++
		}
	} else if got.Blocked {
		tl.seen[1]++
	}
}

// TestPenaltyProperty compares memstore and Valkey (standalone, and a
// Cluster, where AllowAll's two keys make cross-slot calls), with the deny
// cache on and off, with the reference model of penalties on random
// timelines of every algorithm: refusals up to and past After, blocks to
// their last microsecond and past it, escalation, forgiveness at exactly
// Forgive and a microsecond either side, peeks and resets.
func TestPenaltyProperty(t *testing.T) {
	vk, err := valkeystore.New(valkeytest.Shared(t).Client(t))
	if err != nil {
		t.Fatal(err)
	}
	cluster := valkeytest.SharedCluster(t)
	cl, err := valkeystore.New(cluster.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	// Two keys of distinct slots of one node: AllowAll decides them in
	// one cross-slot call.
	same := [2]string{"k0"}
	for i := 1; same[1] == ""; i++ {
		k, s0 := fmt.Sprint("k", i), valkeytest.Slot("{k0}")
		if s := valkeytest.Slot("{" + k + "}"); s != s0 && cluster.PrimaryOf(s) == cluster.PrimaryOf(s0) {
			same[1] = k
		}
	}
	for _, target := range []string{"memstore", "valkey", "cluster"} {
		for _, deny := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/deny=%v", target, deny), func(t *testing.T) {
				var seen [3]int
				seeds, steps := 35, 300
				if target != "memstore" {
					seeds, steps = 14, 150
				}
				for seed := range seeds {
					rng := rand.New(rand.NewPCG(uint64(seed), 30))
					clock := sluicetest.NewClock()
					clock.Advance(time.Duration(rng.Int64N(1e9)) * time.Microsecond)
					tl := &penaltyTimeline{t: t, prefix: fmt.Sprintf("%s-%d", sluicetest.Prefix(t), seed), deny: deny, rng: rng, clock: clock, seen: &seen, keys: [2]string{"k0", "k1"}}
					switch {
					case target == "memstore":
						tl.store = memstore.New(memstore.WithClock(clock.Now))
					case target == "cluster":
						tl.store, tl.keys = cl, same
					case deny:
						tl.store = noNoticesPenalties{vk}
					default:
						tl.store = vk
					}
					if target == "cluster" && deny {
						tl.store = noNoticesPenalties{cl}
					}
					tl.run(seed%7, steps)
				}
				// The timelines must reach what they test.
				if seen[0] < seeds || seen[1] < seeds || seen[2] < seeds/4 {
					t.Fatalf("blocks started %d, blocked refusals %d, escalated blocks %d: too few for %d timelines", seen[0], seen[1], seen[2], seeds)
				}
				t.Logf("blocks started %d, blocked refusals %d, escalated blocks %d", seen[0], seen[1], seen[2])
			})
		}
	}
}
