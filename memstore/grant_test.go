package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

func TestGrantInput(t *testing.T) { sluicetest.RunGrantInput(t, memstore.New()) }

// TestGrantWithheld: a holder's units keep the level's cap below the burst
// until it reports them; the refill an exact bucket at the same level would
// have taken meanwhile is counted, and nothing is counted without holders.
func TestGrantWithheld(t *testing.T) {
	clock := sluicetest.NewClock()
	s := memstore.New(memstore.WithClock(clock.Now))
	r := driver.Rule{Algorithm: driver.AlgorithmGCRA, Limit: 10, Interval: time.Millisecond}
	key := driver.GrantKey("w", "x", r, "k")
	ctx := context.Background()
	take := func(want, unspent int64) driver.GrantResult {
		batch := []driver.GrantOp{{Key: key, Rule: r, Holder: driver.HolderID{1}, Want: want, Unspent: unspent, Life: time.Hour}}
		if err := s.Grant(ctx, batch); err != nil || batch[0].Err != nil {
			t.Fatalf("Grant: %v %v", err, batch[0].Err)
		}
		return batch[0].Result
	}
	res := take(10, 0)
	if res.Granted <= 0 || res.Granted >= 10 {
		t.Fatalf("granted %d of a burst of 10 to one holder, want a share", res.Granted)
	}
	if w := s.GrantWithheld(key, r); w != 0 {
		t.Fatalf("withheld %d right after the grant, want 0", w)
	}
	// A second passes: an exact bucket would be full; the level is capped
	// at the burst less the units held.
	clock.Advance(time.Second)
	if w := s.GrantWithheld(key, r); w != res.Granted {
		t.Fatalf("withheld %d after a second, want the %d units held", w, res.Granted)
	}
	// The holder reports its units spent: the cap rises from then on, and
	// nothing more is withheld.
	take(0, 0)
	clock.Advance(time.Second)
	if w := s.GrantWithheld(key, r); w != res.Granted {
		t.Fatalf("withheld %d after the report and another second, want still %d", w, res.Granted)
	}
	if w := s.GrantWithheld("no such key", r); w != 0 {
		t.Fatalf("withheld %d of a key without grant state", w)
	}
}
