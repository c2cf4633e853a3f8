package valkeystore_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
)

// budgetCluster starts a 3-primary cluster on which a primary may hang
// for a few seconds without the others declaring it failed or refusing
// their own slots.
func budgetCluster(t *testing.T) *valkeytest.Cluster {
	return valkeytest.StartCluster(t, 3, valkeytest.WithArgs("--cluster-node-timeout", "30000", "--cluster-require-full-coverage", "no"))
}

// keysByPrimary returns n keys of each primary of cl, each in a slot of
// its own.
func keysByPrimary(t *testing.T, cl *valkeytest.Cluster, n int) [][]string {
	prefix := sluicetest.Prefix(t)
	keys := make([][]string, len(cl.Primaries))
	seen := map[int]bool{}
	for i, full := 0, 0; full < len(keys); i++ {
		k := prefix + ":" + strconv.Itoa(i)
		sl := valkeytest.Slot(k)
		p := cl.PrimaryOf(sl)
		if seen[sl] || len(keys[p]) == n {
			continue
		}
		seen[sl] = true
		if keys[p] = append(keys[p], k); len(keys[p]) == n {
			full++
		}
	}
	return keys
}

var budgetRule = sluice.Rule{Algorithm: driver.AlgorithmFixedWindow, Limit: 1 << 40, Window: time.Hour}

// warmUp loads both scripts of budgetRule on every primary: one call of
// keys of several slots per primary, and a lone decision per primary.
func warmUp(t *testing.T, s *valkeystore.Store, keys [][]string) {
	var all []driver.Op
	for _, ks := range keys {
		for _, k := range ks {
			all = append(all, driver.Op{Key: k, Rule: budgetRule, Cost: 1})
		}
	}
	if err := s.Do(context.Background(), all); err != nil {
		t.Fatal(err)
	}
	for _, ks := range keys {
		lone := []driver.Op{{Key: ks[0], Rule: budgetRule, Cost: 1}}
		if err := s.Do(context.Background(), lone); err != nil || lone[0].Err != nil {
			t.Fatalf("warm-up: %v %v", err, lone[0].Err)
		}
	}
}

// decideLater decides k with budgetRule on a goroutine of its own, added
// to wg, which reports an error unless the decision is allowed.
func decideLater(t *testing.T, s *valkeystore.Store, wg *sync.WaitGroup, k string) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		op := []driver.Op{{Key: k, Rule: budgetRule, Cost: 1}}
		if err := s.Do(ctx, op); err != nil || op[0].Err != nil || !op[0].Result.Allowed {
			t.Errorf("%s: %+v %v %v", k, op[0].Result, op[0].Err, err)
		}
	}()
}

// TestBudgetSharedAcrossNodes: the calls in flight are a budget of the
// store, shared by a cluster's primaries, not a budget per primary. With
// WithBatching(4) and all three primaries paused, 60 concurrent decisions
// (20 per primary) make at most 6 calls in flight (the budget, and a first
// call of each primary that came once it was spent; here 3, since no
// primary's queue fills a call of 64, see TestBudgetFullCall), every
// primary at least one, and the others queue; once the primaries resume,
// each primary's queue leaves in one call: at most 9 calls for 60
// decisions. A budget per primary makes 12 calls in flight and at least 15
// calls.
func TestBudgetSharedAcrossNodes(t *testing.T) {
	cl := budgetCluster(t)
	s, err := valkeystore.New(cl.Client(t), valkeystore.WithBatching(4))
	if err != nil {
		t.Fatal(err)
	}
	const perPrimary = 20
	keys := keysByPrimary(t, cl, perPrimary)
	warmUp(t, s, keys)
	before := int64(0)
	for _, p := range cl.Primaries {
		before += scriptCallsOf(t, p)
	}
	for _, p := range cl.Primaries {
		p.Pause(t)
		t.Cleanup(func() { p.Resume(t) })
	}
	var wg sync.WaitGroup
	for _, ks := range keys {
		for _, k := range ks {
			decideLater(t, s, &wg, k)
		}
	}
	const total = 3 * perPrimary
	var flying map[string]int
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var queued int
		flying, queued = valkeystore.InFlight(s)
		calls := 0
		for _, n := range flying {
			calls += n
		}
		if calls+queued == total { // every decision is in a call or queued
			if calls > 4+2 {
				t.Errorf("%d calls in flight (%v), want at most 6 (the budget, and a first call of two primaries)", calls, flying)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls in flight (%v) and %d queued, want %d decisions in all", calls, flying, queued, total)
		}
	}
	for _, p := range cl.Primaries {
		if flying[p.Addr] == 0 {
			t.Errorf("primary %s has no call in flight (%v): each node may always start one", p.Addr, flying)
		}
		p.Resume(t)
	}
	wg.Wait()
	calls := int64(0)
	for _, p := range cl.Primaries {
		calls += scriptCallsOf(t, p)
	}
	calls -= before
	t.Logf("%d decisions in %d script calls", total, calls)
	if calls > 6+3 {
		t.Errorf("%d decisions made %d script calls, want at most 9 (6 in flight, then one per primary)", total, calls)
	}
}

// TestBudgetHungPrimary: a hung primary takes the shared part of the
// budget but never the others' own calls. With WithBatching(2), calls of
// at most 4 keys (so that its queue fills a call, for which a primary of a
// cluster starts a second one), no breaker, and primary 0 paused while 16
// goroutines decide its keys with a
// 3s timeout, its calls hold the whole budget for 3s; meanwhile a loaded
// primary (8 goroutines) and an idle one (lone decisions, one at a time)
// decide every decision normally within a 1s timeout, and every caller of
// the hung primary returns by its deadline (with a margin for a loaded
// machine), giving its slot back. Without a call of its own per node, the
// healthy primaries' decisions would wait for the hung calls and time out.
func TestBudgetHungPrimary(t *testing.T) {
	cl := budgetCluster(t)
	s, err := valkeystore.New(cl.Client(t), valkeystore.WithBatching(2), valkeystore.WithMaxKeysPerCall(4), valkeystore.WithoutBreaker())
	if err != nil {
		t.Fatal(err)
	}
	keys := keysByPrimary(t, cl, 16)
	warmUp(t, s, keys)
	hung := cl.Primaries[0]
	hung.Pause(t)
	t.Cleanup(func() { hung.Resume(t) })

	const hungTimeout, timeout = 3 * time.Second, time.Second
	var (
		stop, stopHung atomic.Bool
		wg             sync.WaitGroup
		decided        atomic.Int64
	)
	decide := func(k string, timeout time.Duration) (driver.Op, error, time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		op := []driver.Op{{Key: k, Rule: budgetRule, Cost: 1}}
		start := time.Now()
		err := s.Do(ctx, op)
		return op[0], err, time.Since(start)
	}
	for _, k := range keys[0] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stopHung.Load() {
				op, err, took := decide(k, hungTimeout)
				if err == nil && op.Err == nil {
					t.Errorf("%s: decided by a paused primary: %+v", k, op.Result)
				}
				if e := errors.Join(err, op.Err); !errors.Is(e, context.DeadlineExceeded) {
					t.Errorf("%s on the paused primary: %v, want a deadline exceeded", k, e)
				}
				if took > hungTimeout+time.Second {
					t.Errorf("%s on the paused primary returned after %v, past its deadline (%v)", k, took, hungTimeout)
				}
			}
		}()
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if flying, _ := valkeystore.InFlight(s); flying[hung.Addr] == 2 {
			break
		}
		if time.Now().After(deadline) {
			flying, queued := valkeystore.InFlight(s)
			t.Fatalf("the paused primary never held the whole budget: %v, %d queued", flying, queued)
		}
	}
	healthy := func(ks []string) {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			k := ks[i%len(ks)]
			if op, err, took := decide(k, timeout); err != nil || op.Err != nil || !op.Result.Allowed {
				t.Errorf("%s on a healthy primary, after %v: %+v %v %v", k, took, op.Result, op.Err, err)
				return
			}
			decided.Add(1)
		}
	}
	for range 8 { // a loaded primary
		wg.Add(1)
		go healthy(keys[1])
	}
	wg.Add(1)
	go healthy(keys[2])     // an idle one: every decision a lone one
	time.Sleep(time.Second) // the healthy decisions end before the hung calls
	stop.Store(true)
	stopHung.Store(true)
	wg.Wait()
	// Every caller has returned: every slot was given back, the hung
	// calls' too (their callers returned by their deadlines).
	if flying, _ := valkeystore.InFlight(s); slices.ContainsFunc(slices.Collect(maps.Values(flying)), func(n int) bool { return n != 0 }) {
		t.Errorf("calls still counted in flight after every caller returned: %v", flying)
	}
	if decided.Load() == 0 {
		t.Error("no decision on the healthy primaries")
	}
	t.Logf("%d decisions on the healthy primaries while the hung one held the shared budget", decided.Load())
}

// TestBudgetFullCall: on a cluster, a primary starts a call beyond its
// first only for a full call (WithMaxKeysPerCall decisions queued), within
// the budget. With WithBatching(6), calls of at most 8 keys and primary 0
// paused: a lone decision starts its call at once; 7 more queue behind it,
// without a second call, though the budget has room; the 8th fills a call,
// which leaves at once with all 8.
func TestBudgetFullCall(t *testing.T) {
	cl := budgetCluster(t)
	s, err := valkeystore.New(cl.Client(t), valkeystore.WithBatching(6), valkeystore.WithMaxKeysPerCall(8))
	if err != nil {
		t.Fatal(err)
	}
	keys := keysByPrimary(t, cl, 9)
	warmUp(t, s, keys)
	p := cl.Primaries[0]
	p.Pause(t)
	t.Cleanup(func() { p.Resume(t) })

	var wg sync.WaitGroup
	decide := func(k string) { decideLater(t, s, &wg, k) }
	// await waits until primary 0 has calls in flight and queued requests
	// are queued.
	await := func(calls, queued int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			flying, q := valkeystore.InFlight(s)
			if flying[p.Addr] == calls && q == queued {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v calls in flight and %d queued, want %d on %s and %d queued", flying, q, calls, p.Addr, queued)
			}
		}
	}
	decide(keys[0][0])
	await(1, 0) // a lone decision: at once
	for _, k := range keys[0][1:8] {
		decide(k)
	}
	await(1, 7)
	time.Sleep(100 * time.Millisecond)
	if flying, q := valkeystore.InFlight(s); flying[p.Addr] != 1 || q != 7 {
		t.Errorf("%v calls in flight and %d queued, want 1 on %s and 7 queued: a second call for less than a full call", flying, q, p.Addr)
	}
	decide(keys[0][8])
	await(2, 0) // a full call: at once, within the budget
	p.Resume(t)
	wg.Wait()
}
