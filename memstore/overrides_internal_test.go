package memstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// TestOverridesBounded: lapsed overrides and their index entries are
// dropped at the next put, so the store holds the live ones only.
func TestOverridesBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := New(WithClock(func() time.Time { return now }))
	ctx := context.Background()
	for i := range 100 {
		id := fmt.Sprint(i)
		if err := s.PutOverride(ctx, "idx", "k:"+id, driver.OverrideRecord{Identity: id, Limit: 1, Expires: now.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(time.Minute)
	if err := s.PutOverride(ctx, "idx", "k:live", driver.OverrideRecord{Identity: "live", Limit: 1, Expires: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if len(s.ovs.recs) != 1 || len(s.ovs.in) != 1 || len(s.ovs.index["idx"]) != 1 {
		t.Fatalf("%d records, %d index entries held, want the one live", len(s.ovs.recs), len(s.ovs.index["idx"]))
	}
	list, err := s.ListOverrides(ctx, "idx", func(id string) string { return "k:" + id })
	if err != nil || len(list) != 1 || list[0].Identity != "live" {
		t.Fatalf("%+v %v", list, err)
	}
}
