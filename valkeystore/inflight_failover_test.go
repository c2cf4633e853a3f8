package valkeystore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
)

// TestInFlightFailover: a primary with one replica, killed with -9 under
// lease traffic (holders taking leases of 50 keys for 10ms to 100ms each, then
// releasing them), the replica then promoted; the leases held at the kill
// (acquired, not released) are looked for there. With WithReplicaAck(1) every lease Acquire gave is
// on the promoted replica (a renewal there succeeds); without it, the
// leases lost are only those acquired within the replication lag before
// the kill (lostWindow at most, measured and logged): their slots are free
// early, never taken twice by one holder's renewal.
func TestInFlightFailover(t *testing.T) {
	const lostWindow = time.Second // replication lag on a loaded machine, generous
	primary := valkeytest.Start(t)
	replica := valkeytest.StartReplica(t, primary.Addr)
	pc := primary.Client(t)
	type held struct {
		ack bool
		key string
		id  string
		at  time.Time
		// releasing: a release was sent; whether it ran is unknown.
		releasing bool
	}
	var (
		mu     sync.Mutex
		leases = map[string]held{}
		frozen bool // set just before the kill: leases then holds what was held, and no holder releases
		wg     sync.WaitGroup
	)
	stop := make(chan struct{})
	for _, ack := range []int{1, 0} {
		s, err := valkeystore.New(pc, valkeystore.WithReplicaAck(ack))
		if err != nil {
			t.Fatal(err)
		}
		l, err := sluice.New(s, sluice.InFlight{Limit: 5, Lease: time.Minute}, sluice.WithName(fmt.Sprintf("ack%d", ack)),
			sluice.WithFailMode(sluice.FailClosed), sluice.WithTimeout(time.Second), sluice.WithLogger(discardLogger))
		if err != nil {
			t.Fatal(err)
		}
		for w := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					key := fmt.Sprintf("k%d", (w*1000+i)%50)
					ls, res, err := l.Acquire(context.Background(), key)
					if err != nil || res.Degraded || ls == nil {
						if res.Degraded || err != nil {
							return // the primary is gone
						}
						continue // the key is full
					}
					mu.Lock()
					if !frozen {
						leases[ls.ID()] = held{ack == 1, key, ls.ID(), time.Now(), false}
					}
					mu.Unlock()
					time.Sleep(time.Duration(i%10+1) * 10 * time.Millisecond)
					mu.Lock()
					if frozen {
						mu.Unlock()
						return // held at the kill: never released
					}
					if h, ok := leases[ls.ID()]; ok {
						h.releasing = true // released or not, from now on: unknown
						leases[ls.ID()] = h
					}
					mu.Unlock()
					if _, err := ls.Release(context.Background()); err != nil {
						return
					}
					mu.Lock()
					if !frozen {
						delete(leases, ls.ID())
					}
					mu.Unlock()
				}
			}()
		}
	}
	// Kill the primary once enough leases are held (a loaded machine may
	// take longer than the usual 300ms to get there).
	heldNow := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, h := range leases {
			if !h.releasing {
				n++
			}
		}
		return n
	}
	time.Sleep(300 * time.Millisecond)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && heldNow() < 15; {
		time.Sleep(20 * time.Millisecond)
	}
	// Freeze first: from then on no holder releases, so what leases holds
	// (not releasing) is held at the kill, however long the kill takes.
	mu.Lock()
	frozen = true
	mu.Unlock()
	primary.Kill(t)
	killed := time.Now()
	close(stop)
	wg.Wait()
	replica.Promote(t)
	rs, err := valkeystore.New(replica.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	lost, kept, lostAck := 0, 0, 0
	var oldestLost time.Duration
	limiters := map[bool]*sluice.Limiter{}
	for _, ack := range []bool{true, false} {
		name := "ack0"
		if ack {
			name = "ack1"
		}
		l, err := sluice.New(rs, sluice.InFlight{Limit: 5, Lease: time.Minute}, sluice.WithName(name), sluice.WithTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		limiters[ack] = l
	}
	n := 0
	for _, h := range leases {
		if h.releasing {
			continue
		}
		n++
		ls, err := limiters[h.ack].Lease(h.key, h.id)
		if err != nil {
			t.Fatal(err)
		}
		switch err := ls.Renew(context.Background()); {
		case err == nil:
			kept++
		case errors.Is(err, sluice.ErrLeaseLost):
			lost++
			if h.ack {
				lostAck++
			}
			oldestLost = max(oldestLost, killed.Sub(h.at))
		default:
			t.Fatalf("renew on the promoted replica: %v", err)
		}
	}
	t.Logf("%d leases held at the kill: %d on the promoted replica, %d lost (acquired at most %v before the kill)", n, kept, lost, oldestLost)
	if n < 10 {
		t.Fatalf("only %d leases held at the kill", n)
	}
	if lostAck > 0 {
		t.Errorf("%d leases acknowledged under WithReplicaAck(1) were lost", lostAck)
	}
	if oldestLost > lostWindow {
		t.Errorf("a lease acquired %v before the kill was lost, want at most %v (the replication lag)", oldestLost, lostWindow)
	}
}
