package valkeystore_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
)

// sentinelRecovery bounds the time from the Sentinels' promotion of the
// replica to normal decisions: the client's switch to the new master on
// the Sentinels' +switch-master, the breaker's probe, and a margin.
const sentinelRecovery = 3 * time.Second

// TestSentinelFailover: a master with one replica, watched by three
// Sentinels (down-after 1s), with traffic through a Sentinel client. The
// master is killed with -9: decisions follow their fail mode until the
// Sentinels promote the replica, then are decided by it again within
// sentinelRecovery; every decision comes within the bound.
func TestSentinelFailover(t *testing.T) {
	primary := valkeytest.Start(t)
	replica := valkeytest.StartReplica(t, primary.Addr)
	ss := valkeytest.StartSentinels(t, primary, 3, 1)
	s, err := valkeystore.New(ss.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Breakers(); len(got) != 1 || got["master"] != valkeystore.BreakerClosed {
		t.Errorf("breakers %v, want one for the master, closed", got)
	}
	r := newRig(t, ss.Client(t))
	r.healthy(t)
	tr := r.traffic(t, 4)
	time.Sleep(200 * time.Millisecond)
	killed := time.Now()
	primary.Kill(t)
	var promoted time.Time
	for {
		if m, err := ss.Master(); err == nil && m == replica.Addr {
			promoted = time.Now()
			break
		}
		if time.Since(killed) > 20*time.Second {
			t.Fatalf("the Sentinels did not promote %s within 20s", replica.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := r.recoveredWithin(t, promoted, sentinelRecovery)
	stats := tr.Stop()
	if r.obs.summary()["circuit open"]+r.obs.summary()["network"]+r.obs.summary()["timeout"] == 0 {
		t.Errorf("no decision degraded while the master was dead: errors %v", r.obs.summary())
	}
	t.Logf("master %s killed; replica %s promoted %v later; decisions normal %v after the promotion; traffic: %s; errors %v",
		primary.Addr, replica.Addr, promoted.Sub(killed), took, stats, r.obs.summary())
}
