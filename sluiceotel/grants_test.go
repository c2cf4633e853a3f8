package sluiceotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// TestGrants: the grant counters of real limiters with grants, read at
// collection: those of one name summed, an ObserveGrantsFunc source for
// another name, every value Limiter.GrantStats's; after Unregister, none.
func TestGrants(t *testing.T) {
	tel := newTelemetry(t)
	st := memstore.New()
	mk := func(name string) *sluice.Limiter {
		l, err := sluice.New(st, sluice.GCRA{Rate: 1, Per: time.Hour, Burst: 40}, sluice.WithName(name),
			sluice.WithGrants(sluice.GrantOptions{}), sluice.WithObserver(tel.obs))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, b := mk("hot"), mk("hot")
	reg, err := tel.obs.ObserveGrants(a, b)
	if err != nil {
		t.Fatal(err)
	}
	carried := sluice.GrantStats{Calls: 7, Granted: 5, Returned: 5, Local: 3}
	if _, err := tel.obs.ObserveGrantsFunc(func() map[string]sluice.GrantStats { return map[string]sluice.GrantStats{"old": carried} }); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 60 {
		a.Allow(ctx, "k"+string(rune('a'+i%3)))
		b.Allow(ctx, "k"+string(rune('a'+i%3)))
	}
	a.Close() // waits for the calls in flight: the counters stay put
	b.Close()
	hot := a.GrantStats().Add(b.GrantStats())
	if hot.Local == 0 || hot.Store == 0 || hot.Keys != 6 {
		t.Fatalf("the limiters did not use their grants: %+v", hot)
	}
	pts := tel.points(t)
	for _, c := range []struct {
		name string
		s    sluice.GrantStats
	}{{"hot", hot}, {"old", carried}} {
		p := "rate_limit.policy=" + c.name // attributes in order of key
		for id, want := range map[string]int64{
			"sluice.grant.calls{" + p + "}":                                   c.s.Calls,
			"sluice.grants{rate_limit.grant.event=taken," + p + "}":           c.s.Taken,
			"sluice.grants{rate_limit.grant.event=renewed," + p + "}":         c.s.Renewed,
			"sluice.grant.units{rate_limit.grant.event=granted," + p + "}":    c.s.Granted,
			"sluice.grant.units{rate_limit.grant.event=returned," + p + "}":   c.s.Returned,
			"sluice.grant.units{rate_limit.grant.event=expired," + p + "}":    c.s.Expired,
			"sluice.grant.decisions{rate_limit.grant.where=local," + p + "}":  c.s.Local,
			"sluice.grant.decisions{rate_limit.grant.where=valkey," + p + "}": c.s.Store,
			"sluice.grant.decisions{rate_limit.grant.where=failed," + p + "}": c.s.Failed,
			"sluice.grant.mixed{" + p + "}":                                   c.s.Mixed,
			"sluice.grant.keys{" + p + "}":                                    c.s.Keys,
		} {
			if v, ok := pts[id]; !ok || v != float64(want) {
				t.Errorf("%s = %v (present %v), want %d", id, v, ok, want)
			}
		}
	}
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	if _, ok := tel.points(t)["sluice.grant.calls{rate_limit.policy=hot}"]; ok {
		t.Error("hot's grants still exported after Unregister")
	}
}
