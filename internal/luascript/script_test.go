package luascript_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/luascript"
	"github.com/sluicehq/sluice/internal/valkeytest"
)

// TestScriptReply runs a script on a real Valkey, its arguments written by
// AppendArgs, and reads its reply with DecodeCall: the records AppendArgs
// writes are the ones batch.lua reads, and those batch.lua packs are the
// ones DecodeCall reads,
// field by field, for a call of several keys (one of them twice) at a time
// in microseconds above 2^50.
func TestScriptReply(t *testing.T) {
	c := valkeytest.Start(t).Client(t)
	ctx := context.Background()
	const now = 1_764_000_000_000_000
	rule := sluice.Rule{Algorithm: sluice.AlgorithmGCRA, Limit: 2, Interval: time.Millisecond}
	keys := []string{"{t}a", "{t}b", "{t}a", "{t}a"}
	var args []byte
	for range keys {
		op := sluice.Op{Key: "k", Rule: rule, Cost: 1, Now: time.UnixMicro(now)}
		args = luascript.AppendArgs(args, &op, 0, time.Time{})
	}
	sc := luascript.For(sluice.AlgorithmGCRA)
	reply, err := c.Do(ctx, c.B().Eval().Script(sc.Src).Numkeys(int64(len(keys))).Key(keys...).Arg(string(args)).Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	// GCRA, burst 2, a token every millisecond, all at one instant: a
	// takes its two, b its first, a's third is refused.
	want := []struct {
		res     sluice.Result
		receipt int64
	}{
		{sluice.Result{Allowed: true, Remaining: 1, ResetAfter: time.Millisecond}, now + 1000},
		{sluice.Result{Allowed: true, Remaining: 1, ResetAfter: time.Millisecond}, now + 1000},
		{sluice.Result{Allowed: true, Remaining: 0, ResetAfter: 2 * time.Millisecond}, now + 2000},
		{sluice.Result{RetryAfter: time.Millisecond, ResetAfter: 2 * time.Millisecond}, now + 2000},
	}
	n := 0
	err = luascript.DecodeCall(reply, len(keys), func(j int, res sluice.Result, receipt int64, err error) {
		n++
		if err != nil || res != want[j].res || receipt != want[j].receipt {
			t.Errorf("decision %d: %+v receipt %d %v, want %+v receipt %d", j, res, receipt, err, want[j].res, want[j].receipt)
		}
	})
	if err != nil || n != len(keys) {
		t.Fatalf("%v after %d decisions", err, n)
	}
}
