package valkeystore_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
)

// The differential suites on a cluster: batches whose keys span several
// slots of one primary are decided in one script call (batching per node),
// and every Result must match memstore's.
func TestDifferentialCluster(t *testing.T) {
	sluicetest.RunDifferential(t, harness(t, valkeytest.SharedCluster(t).Client(t)))
}

func TestDifferentialBatchesCluster(t *testing.T) {
	sluicetest.RunDifferentialBatches(t, harness(t, valkeytest.SharedCluster(t).Client(t)))
}

func TestDifferentialCalendarCluster(t *testing.T) {
	sluicetest.RunDifferentialCalendar(t, harness(t, valkeytest.SharedCluster(t).Client(t)))
}

var scriptCallStats = regexp.MustCompile(`cmdstat_(evalsha|eval):calls=(\d+)`)

// scriptCallsOf returns the EVALSHA and EVAL calls s has run.
func scriptCallsOf(t testing.TB, s *valkeytest.Server) int64 {
	t.Helper()
	v, err := s.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, m := range scriptCallStats.FindAllStringSubmatch(fmt.Sprint(v), -1) {
		c, _ := strconv.ParseInt(m[2], 10, 64)
		n += c
	}
	return n
}

// TestBatchPerNode decides keys of many slots in one Do on a 3-primary
// cluster: each primary runs one script call per algorithm (per 64 keys),
// not one per slot, and every key gets its own Result.
func TestBatchPerNode(t *testing.T) {
	cl := valkeytest.StartCluster(t, 3)
	probe := new(valkeystore.Probe)
	s := newStore(t, cl.Client(t), valkeystore.WithProbe(probe))
	prefix := sluicetest.Prefix(t)
	var rules []sluice.Rule
	for _, p := range []sluice.Policy{
		sluice.FixedWindow{Limit: 10, Window: time.Minute},
		sluice.SlidingLog{Limit: 10, Window: time.Minute},
	} {
		r, err := p.Rule()
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, r)
	}
	const perRule = 90 // 30 per primary: fewer than 64, one call each
	run := func(round int) {
		var ops []driver.Op
		for ri, r := range rules {
			for k := range perRule {
				ops = append(ops, driver.Op{Key: fmt.Sprintf("%s:r%d:k%d", prefix, ri, k), Rule: r, Cost: 1})
			}
		}
		if err := s.Do(context.Background(), ops); err != nil {
			t.Fatal(err)
		}
		for i, op := range ops {
			if op.Err != nil || !op.Result.Allowed || op.Result.Remaining != 10-int64(round) {
				t.Fatalf("round %d op %d (%s): %+v %v", round, i, op.Key, op.Result, op.Err)
			}
		}
	}
	run(1) // loads the scripts (NOSCRIPT, then EVAL)
	before := map[*valkeytest.Server]int64{}
	slots := map[int]map[int]bool{} // primary -> slots of the keys it serves
	for i, p := range cl.Primaries {
		before[p] = scriptCallsOf(t, p)
		slots[i] = map[int]bool{}
	}
	for ri := range rules {
		for k := range perRule {
			sl := valkeytest.Slot(fmt.Sprintf("%s:r%d:k%d", prefix, ri, k))
			slots[cl.PrimaryOf(sl)][sl] = true
		}
	}
	run(2)
	for i, p := range cl.Primaries {
		calls := scriptCallsOf(t, p) - before[p]
		if calls > int64(len(rules)) || len(slots[i]) <= len(rules) {
			t.Errorf("primary %d: %d script calls for keys of %d slots, want at most %d (one per algorithm)",
				i, calls, len(slots[i]), len(rules))
		}
	}
	// A lone decision is one call of its own slot, not a cross call (the
	// first loads the script of one slot on its node; the second counts).
	lone := func(k string) {
		op := []driver.Op{{Key: k, Rule: rules[0], Cost: 1}}
		if err := s.Do(context.Background(), op); err != nil || op[0].Err != nil || !op[0].Result.Allowed {
			t.Fatalf("lone decision: %+v, %v, %v", op[0].Result, op[0].Err, err)
		}
	}
	lone("{lone}a")
	p := cl.Primaries[cl.PrimaryOf(valkeytest.Slot("{lone}b"))]
	calls, cross := scriptCallsOf(t, p), probe.CrossCalls()
	lone("{lone}b")
	if got := scriptCallsOf(t, p) - calls; got != 1 || probe.CrossCalls() != cross {
		t.Errorf("a lone decision made %d script calls (%d cross), want 1 (0)", got, probe.CrossCalls()-cross)
	}
}

// TestBatchPerNodeReshard sends batches of keys spread over one primary's
// slots while some of those slots move to another primary (IMPORTING,
// MIGRATING, MIGRATE, SETSLOT, as valkey-cli --cluster reshard does). A
// call whose keys are no longer all on its node is refused before it runs
// and split per slot: every take is counted exactly once (the count each
// key holds afterwards equals the takes allowed), and none fails.
func TestBatchPerNodeReshard(t *testing.T) {
	cl := valkeytest.StartCluster(t, 3)
	probe := new(valkeystore.Probe)
	s := newStore(t, cl.Client(t), valkeystore.WithProbe(probe))
	prefix := sluicetest.Prefix(t)
	const lo, hi = 0, 99 // moved from primary 0 to primary 1; primary 0 keeps the rest
	var keys []string
	moved := 0
	for i := 0; len(keys) < 64; i++ {
		k := prefix + ":" + strconv.Itoa(i)
		sl := valkeytest.Slot(k)
		if cl.PrimaryOf(sl) != 0 {
			continue
		}
		if sl <= hi {
			moved++
		} else if moved < 32 && len(keys)-moved >= 32 {
			continue // half moved, half staying
		}
		keys = append(keys, k)
	}
	for i := 0; moved < 32; i++ { // keys of the moved slots
		k := fmt.Sprintf("%s:m%d", prefix, i)
		if sl := valkeytest.Slot(k); sl >= lo && sl <= hi {
			keys = append(keys, k)
			moved++
		}
	}
	rule := sluice.Rule{Algorithm: driver.AlgorithmFixedWindow, Limit: 1 << 40, Window: time.Hour}
	before := probe.CrossSplits()
	var (
		mu    sync.Mutex
		takes = map[string]int64{}
	)
	stop := loop(4, func(w, i int) bool {
		ops := make([]driver.Op, 16)
		for j := range ops {
			ops[j] = driver.Op{Key: keys[(w*7+i*16+j)%len(keys)], Rule: rule, Cost: 1}
		}
		if err := s.Do(context.Background(), ops); err != nil {
			t.Error(err)
			return false
		}
		mu.Lock()
		for _, op := range ops {
			if op.Err != nil {
				t.Errorf("%s (slot %d): %v", op.Key, valkeytest.Slot(op.Key), op.Err)
			} else if op.Result.Allowed {
				takes[op.Key]++
			}
		}
		mu.Unlock()
		return true
	})
	time.Sleep(200 * time.Millisecond)
	cl.MoveSlots(t, cl.Primaries[0], cl.Primaries[1], lo, hi)
	time.Sleep(300 * time.Millisecond)
	stop()
	if probe.CrossSplits() == before {
		t.Error("no call was split: the reshard never met a call spanning moved and kept slots")
	}
	peek := make([]driver.Op, len(keys))
	for i, k := range keys {
		peek[i] = driver.Op{Key: k, Rule: rule, Cost: 0}
	}
	if err := s.Do(context.Background(), peek); err != nil {
		t.Fatal(err)
	}
	for _, op := range peek {
		if op.Err != nil {
			t.Fatalf("%s: %v", op.Key, op.Err)
		}
		if used := rule.Limit - op.Result.Remaining; used != takes[op.Key] {
			t.Errorf("%s (slot %d): the server counted %d takes, %d were allowed", op.Key, valkeytest.Slot(op.Key), used, takes[op.Key])
		}
	}
}

// TestBatchPerNodeReplicaAck: with WithReplicaAck, whose WAIT must follow
// the script on its slot's connection, no call spans several slots.
func TestBatchPerNodeReplicaAck(t *testing.T) {
	probe := new(valkeystore.Probe)
	s, err := valkeystore.New(valkeytest.SharedCluster(t).Client(t), valkeystore.WithReplicaAck(1), valkeystore.WithoutBreaker(), valkeystore.WithProbe(probe))
	if err != nil {
		t.Fatal(err)
	}
	prefix := sluicetest.Prefix(t)
	r, _ := sluice.FixedWindow{Limit: 10, Window: time.Minute}.Rule()
	ops := make([]driver.Op, 30)
	for i := range ops {
		ops[i] = driver.Op{Key: fmt.Sprintf("%s:%d", prefix, i), Rule: r, Cost: 1, Deadline: time.Now().Add(100 * time.Millisecond)}
	}
	cross := probe.CrossCalls()
	if err := s.Do(context.Background(), ops); err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		if op.Err == nil && !op.Result.Allowed {
			t.Errorf("%s: %+v", op.Key, op.Result)
		}
	}
	if n := probe.CrossCalls() - cross; n != 0 {
		t.Errorf("%d calls spanned several slots with WithReplicaAck", n)
	}
}
