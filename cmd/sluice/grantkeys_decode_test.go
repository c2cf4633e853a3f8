package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
)

// TestInspectGrantsAsTheScript: inspect's reading of a grant hash agrees
// with the grant script on a real Valkey, for a hash several holders left:
// one whose grant ended long ago with units unreported (a crashed
// process: its units are void, and the level refilled past the cap they
// held from their end on), one holding units, one gone (ended, unseen).
// The units available are those the script finds (its reply's level, for a
// call of a new holder wanting nothing), the units held exclude the ended
// grant's, and the holders counted are those the script counts. Fails
// when inspect counts an ended grant's units as held or caps the level
// under them (it showed 10 available and 10 held; the script: 11 and 4).
func TestInspectGrantsAsTheScript(t *testing.T) {
	v := valkeytest.Shared(t)
	c := v.Client(t)
	ctx := context.Background()
	st, err := valkeystore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	rule := driver.Rule{Algorithm: driver.AlgorithmGCRA, Limit: 20, Interval: time.Hour}
	key := fmt.Sprintf("inspectgrants%d:g1.gcra:{k}", time.Now().UnixNano())
	now, err := valkeyNow(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	const h, s = int64(time.Hour / time.Microsecond), int64(time.Second / time.Microsecond)
	fields := map[string]string{
		"v": "1", "l": fmt.Sprint(10*h - s), "t": fmt.Sprint(now - 2*h),
		"h:00000000000000aa": fmt.Sprintf("6 %d %d", now-3*h/2, now+h), // ended, still seen
		"h:00000000000000bb": fmt.Sprintf("4 %d %d", now+h, now+h),     // holding
		"h:00000000000000cc": fmt.Sprintf("0 %d %d", now-s, now-s),     // gone
	}
	cmd := c.B().Hset().Key(key).FieldValue()
	for f, val := range fields {
		cmd = cmd.FieldValue(f, val)
	}
	if err := c.Do(ctx, cmd.Build()).Error(); err != nil {
		t.Fatal(err)
	}
	raw, err := c.Do(ctx, c.B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	if now, err = valkeyNow(ctx, c); err != nil {
		t.Fatal(err)
	}
	g, err := decodeGrants(rule, raw, now)
	if err != nil {
		t.Fatal(err)
	}
	op := []driver.GrantOp{{Key: key, Rule: rule, Holder: driver.HolderID{0xdd}, Life: time.Second, Deadline: time.Now().Add(5 * time.Second)}}
	if err := st.Grant(ctx, op); err != nil || op[0].Err != nil {
		t.Fatal(err, op[0].Err)
	}
	res := op[0].Result
	if g.Available != res.Level || g.Held != 4 || int64(g.Counting)+1 != res.Holders {
		t.Fatalf("inspect: %d available, %d held, %d holders counted; the script: %d available, %d holders with the caller (want 4 held)",
			g.Available, g.Held, g.Counting, res.Level, res.Holders)
	}
	for _, hd := range g.Holders {
		if want := hd.ID != "00000000000000cc"; hd.Counted != want {
			t.Fatalf("holder %s counted %v, want %v", hd.ID, hd.Counted, want)
		}
	}
}
