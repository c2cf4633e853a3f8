package valkeystore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
)

// TestReservations: random timelines of reservations on Valkey agree with
// the reference model, standalone and on a cluster.
func TestReservations(t *testing.T) {
	sluicetest.RunReservations(t, sluicetest.Harness{Store: newStore(t, valkeytest.Shared(t).Client(t))}, 60)
}

func TestReservationsCluster(t *testing.T) {
	sluicetest.RunReservations(t, sluicetest.Harness{Store: newStore(t, valkeytest.SharedCluster(t).Client(t))}, 30)
}

// TestReservationsSentinel: through Sentinel, the same timelines and the
// same bad input.
func TestReservationsSentinel(t *testing.T) {
	primary := valkeytest.Start(t)
	ss := valkeytest.StartSentinels(t, primary, 1, 0)
	h := sluicetest.Harness{Store: newStore(t, ss.Client(t))}
	sluicetest.RunReservations(t, h, 10)
	sluicetest.RunReservationInput(t, h)
}

func TestReservationOverride(t *testing.T) {
	sluicetest.RunReservationOverride(t, sluicetest.Harness{Store: newStore(t, valkeytest.Shared(t).Client(t))})
}

func TestReservationCalendar(t *testing.T) {
	sluicetest.RunReservationCalendar(t, sluicetest.Harness{Store: newStore(t, valkeytest.Shared(t).Client(t))})
}

func TestReservationInput(t *testing.T) {
	sluicetest.RunReservationInput(t, sluicetest.Harness{Store: newStore(t, valkeytest.Shared(t).Client(t))})
}

// TestReservationsAcrossProcesses: several stores (each its own client,
// as separate processes have) reserve and settle concurrently against one
// token-per-minute limit, settling above and below their estimates: what
// is admitted never passes the limit plus the debt bound, and every
// reservation settles once.
func TestReservationsAcrossProcesses(t *testing.T) {
	t.Run("standalone", func(t *testing.T) { acrossProcesses(t, func() valkey.Client { return valkeytest.Shared(t).Client(t) }) })
	t.Run("cluster", func(t *testing.T) {
		c := valkeytest.StartCluster(t, 3, valkeytest.WithReplicas(1)) // 3 primaries, 3 replicas
		acrossProcesses(t, func() valkey.Client { return c.Client(t) })
	})
}

func acrossProcesses(t *testing.T, client func() valkey.Client) {
	ctx := context.Background()
	prefix := sluicetest.Prefix(t)
	const limit, maxDebt, procs, per = 100, 20, 4, 40
	var ls []*sluice.Limiter
	for range procs {
		// A fixed window of an hour: nothing is earned back during the test,
		// so every unit admitted is counted against one limit.
		l, err := sluice.New(newStore(t, client()), sluice.FixedWindow{Limit: limit, Window: time.Hour}, sluice.WithPrefix(prefix), sluice.WithName("tpm"),
			sluice.WithTimeout(5*time.Second), sluice.WithReservations(sluice.ReserveOptions{MaxDebt: maxDebt}), sluice.WithLogger(discardLogger))
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	var charged, settledTwice, refused atomic.Int64
	var wg sync.WaitGroup
	for p, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			other := ls[(p+1)%procs] // settles come from another process
			for i := range per {
				est := int64(1 + (i*7+p)%9)
				r, err := l.Reserve(ctx, "tenant", est)
				if err != nil {
					t.Error(err)
					return
				}
				if !r.Allowed {
					refused.Add(1)
					continue
				}
				actual := est + int64(i%5) - 2
				actual = max(0, actual)
				s, err := other.Settle(ctx, "tenant", r.ID, actual)
				if err != nil || !s.Settled {
					t.Error(s, err)
					return
				}
				charged.Add(actual - s.Unpaid)
				// Retried, as after a timeout, from a third process: counted once.
				again, err := ls[(p+2)%procs].Settle(ctx, "tenant", r.ID, actual)
				if err != nil || again.Settled {
					t.Error(again, err)
				}
				if again.Settled {
					settledTwice.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	// What the settles charged is what was admitted: never beyond the
	// limit plus the debt bound (an hour's window edge could only lower
	// it), and the limit was reached (some reservations were refused).
	if got := charged.Load(); got > limit+maxDebt || refused.Load() == 0 {
		t.Errorf("charged %d (limit %d + max debt %d), %d refused", got, limit, maxDebt, refused.Load())
	}
	if settledTwice.Load() != 0 {
		t.Errorf("settled twice %d", settledTwice.Load())
	}
}

// TestSettleRetriedAfterTimeout: a settle whose reply never came (the
// caller timed out) is sent again by another process: the excess is
// charged once.
func TestSettleRetriedAfterTimeout(t *testing.T) {
	ctx := context.Background()
	prefix := sluicetest.Prefix(t)
	mk := func() *sluice.Limiter {
		l, err := sluice.New(newStore(t, valkeytest.Shared(t).Client(t)), sluice.GCRA{Rate: 10, Per: time.Minute, Burst: 10}, sluice.WithPrefix(prefix), sluice.WithName("g"),
			sluice.WithTimeout(5*time.Second), sluice.WithReservations(sluice.ReserveOptions{}))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, b := mk(), mk()
	r, err := a.Reserve(ctx, "k", 2)
	if err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	// The first settle runs, but its caller stops waiting before the reply.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = a.Settle(cctx, "k", r.ID, 5)
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	<-done
	s, err := b.Settle(ctx, "k", r.ID, 5)
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.Peek(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	// 10 - 5 = 5 left (less a part of a unit earned meanwhile), whichever
	// settle ran: never 10 - 2 - 3 - 3.
	if res.Remaining != 5 {
		t.Errorf("remaining %d after a settle retried (second: %+v), want 5", res.Remaining, s)
	}
}
