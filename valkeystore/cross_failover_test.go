//go:build failover

package valkeystore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
)

// TestClusterFailoverBatchPerNode: batches of keys spread over every
// primary's slots (so each primary gets calls of several slots, batching
// per node) through a graceful CLUSTER FAILOVER of one primary, then -9 of
// another. For every key, the count the cluster holds afterwards is at
// least the takes allowed (none lost; on a graceful failover) and at most
// the takes allowed plus the takes whose outcome is unknown (a timeout or
// broken connection: none decided twice); decisions on primaries not
// involved never fail.
func TestClusterFailoverBatchPerNode(t *testing.T) {
	cl := valkeytest.StartCluster(t, 3, valkeytest.WithReplicas(1), valkeytest.WithArgs("--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no"))
	probe := new(valkeystore.Probe)
	s, err := valkeystore.New(cl.Client(t), valkeystore.WithProbe(probe))
	if err != nil {
		t.Fatal(err)
	}
	prefix := sluicetest.Prefix(t)
	var keys []string
	for i := range 90 {
		keys = append(keys, fmt.Sprintf("%s:%d", prefix, i))
	}
	ownerAt := func(k string) int { return cl.PrimaryOf(valkeytest.Slot(k)) }
	rule := sluice.Rule{Algorithm: driver.AlgorithmFixedWindow, Limit: 1 << 40, Window: time.Hour}
	type tally struct{ allowed, unknown, failed int64 }
	var (
		mu     sync.Mutex
		counts = map[string]*tally{}
		down   = map[int]bool{} // primaries whose keys may fail now
	)
	for _, k := range keys {
		counts[k] = &tally{}
	}
	calls0 := probe.CrossCalls()
	stop := loop(6, func(w, i int) bool {
		ops := make([]driver.Op, 24)
		for j := range ops {
			ops[j] = driver.Op{Key: keys[(w*13+i*24+j)%len(keys)], Rule: rule, Cost: 1, Deadline: time.Now().Add(500 * time.Millisecond)}
		}
		_ = s.Do(context.Background(), ops)
		mu.Lock()
		for _, op := range ops {
			c := counts[op.Key]
			switch {
			case op.Err == nil:
				if op.Result.Allowed {
					c.allowed++
				}
			case errors.Is(op.Err, context.DeadlineExceeded) || !errors.Is(op.Err, valkeystore.ErrCircuitOpen) && !isReply(op.Err):
				c.unknown++ // it may have run
				if !down[ownerAt(op.Key)] {
					t.Errorf("%s on a primary not involved: %v", op.Key, op.Err)
				}
			default:
				c.failed++ // refused before it ran
				if !down[ownerAt(op.Key)] {
					t.Errorf("%s on a primary not involved: %v", op.Key, op.Err)
				}
			}
		}
		mu.Unlock()
		return true
	})
	setDown := func(i int, v bool) {
		mu.Lock()
		down[i] = v
		mu.Unlock()
	}
	time.Sleep(300 * time.Millisecond)

	// A graceful failover: the second primary's replica takes over.
	setDown(1, true)
	cl.Failover(t, cl.Replicas[1], 16384/3)
	time.Sleep(500 * time.Millisecond)
	setDown(1, false)
	time.Sleep(300 * time.Millisecond)

	// The first primary killed with -9: its replica is promoted.
	setDown(0, true)
	cl.Primaries[0].Kill(t)
	cl.WaitOwner(t, 0, cl.Replicas[0], 20*time.Second)
	time.Sleep(failoverRecovery)
	stop()

	if probe.CrossCalls() == calls0 {
		t.Fatal("no call spanned several slots: batching per node was not exercised")
	}
	peek := make([]driver.Op, len(keys))
	for i, k := range keys {
		peek[i] = driver.Op{Key: k, Rule: rule}
	}
	if err := s.Do(context.Background(), peek); err != nil {
		t.Fatal(err)
	}
	var allowed, unknown int64
	for _, op := range peek {
		if op.Err != nil {
			t.Fatalf("%s: %v", op.Key, op.Err)
		}
		c := counts[op.Key]
		allowed += c.allowed
		unknown += c.unknown
		held := rule.Limit - op.Result.Remaining
		// A -9 may lose writes not yet replicated (asynchronous
		// replication): only the upper bound holds on the dead primary's
		// slots.
		lossy := ownerAt(op.Key) == 0
		if held > c.allowed+c.unknown || !lossy && held < c.allowed {
			t.Errorf("%s (primary %d): the cluster holds %d takes; %d were allowed, %d unknown", op.Key, ownerAt(op.Key), held, c.allowed, c.unknown)
		}
	}
	t.Logf("%d takes allowed, %d of unknown outcome; %d calls spanned several slots, %d of them split after a refusal",
		allowed, unknown, probe.CrossCalls()-calls0, probe.CrossSplits())
}

// isReply reports whether err carries a server's reply (the call was
// refused, not lost).
func isReply(err error) bool {
	var verr *valkey.ValkeyError
	return errors.As(err, &verr)
}

// failoverRecovery bounds the time from a replica's promotion (every node
// agrees) to normal decisions on its slots: the client's map refresh (up
// to a second), the breaker's probe (up to 250ms), and a margin for a
// loaded machine.
const failoverRecovery = 3 * time.Second
