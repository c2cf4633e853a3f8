package valkeystore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/luascript"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/valkeytest"
)

// TestCrossRefusesBeforeWriting sends every algorithm's Cross script, as
// the store builds it, to a primary with a decision on one of its keys
// followed by one on a key it does not serve (or with an override key it
// does not serve): the call replies NOTLOCAL and the served key is not
// written. With both keys served (two of its slots), the call decides
// both. The algorithms whose decide only reads rely on their own reads
// for it, the sliding log and override keys on a read of every key first
// (cross.lua).
func TestCrossRefusesBeforeWriting(t *testing.T) {
	cl := valkeytest.SharedCluster(t)
	s, err := New(cl.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	e := s.e
	prefix := sluicetest.Prefix(t)
	seq := 0
	// keyOf returns a new key served by primary p, in a slot other than avoid's.
	keyOf := func(p int, avoid string) string {
		for {
			seq++
			k := prefix + ":" + strconv.Itoa(seq)
			if sl := valkeytest.Slot(k); cl.PrimaryOf(sl) == p && (avoid == "" || sl != valkeytest.Slot(avoid)) {
				return k
			}
		}
	}
	policies := map[string]sluice.Policy{
		"fixed window":   sluice.FixedWindow{Limit: 5, Window: time.Minute},
		"calendar":       sluice.FixedWindow{Limit: 5, Calendar: sluice.Calendar{Unit: sluice.Day, Zone: time.UTC}},
		"sliding log":    sluice.SlidingLog{Limit: 5, Window: time.Minute},
		"sliding window": sluice.SlidingWindow{Limit: 5, Window: time.Minute},
		"token bucket":   sluice.TokenBucket{Capacity: 5, Rate: 1, Per: time.Second},
		"gcra":           sluice.GCRA{Rate: 1, Per: time.Second, Burst: 5},
	}
	ctx := context.Background()
	exists := func(k string) bool {
		n, err := e.client.Do(ctx, e.client.B().Exists().Key(k).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	for name, p := range policies {
		rule, err := p.Rule()
		if err != nil {
			t.Fatal(err)
		}
		served := keyOf(0, "")
		n := e.nodeOf(served)
		if !n.crossOK() {
			t.Fatalf("%s: no cross calls to %s", name, n.name)
		}
		send := func(batch []driver.Op) error {
			c := call{alg: rule.Algorithm, sc: luascript.ForRule(&rule), ops: []int{0, 1}, cross: true}
			return n.clientFor(&c).Do(ctx, e.command(batch, c, false)).Error()
		}
		for _, tc := range []struct {
			what  string
			batch []driver.Op
		}{
			{"a key of another primary", []driver.Op{
				{Key: served, Rule: rule, Cost: 1},
				{Key: keyOf(1, ""), Rule: rule, Cost: 1},
			}},
			{"an override key of another primary", []driver.Op{
				{Key: served, Rule: rule, Cost: 1},
				{Key: keyOf(0, served), Rule: rule, Cost: 1, Override: keyOf(2, "")},
			}},
		} {
			err := send(tc.batch)
			if err == nil || !strings.HasPrefix(err.Error(), "NOTLOCAL ") {
				t.Errorf("%s, %s: %v, want NOTLOCAL", name, tc.what, err)
			}
			if exists(served) {
				t.Errorf("%s, %s: the served key was written by a call that replied %v", name, tc.what, err)
			}
		}
		both := []driver.Op{{Key: served, Rule: rule, Cost: 1}, {Key: keyOf(0, served), Rule: rule, Cost: 1}}
		if err := send(both); err != nil {
			t.Errorf("%s, two slots of one primary: %v", name, err)
		}
		if !exists(served) || !exists(both[1].Key) {
			t.Errorf("%s, two slots of one primary: the keys were not written", name)
		}
	}
}
