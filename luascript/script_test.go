package luascript_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/luascript"
	"github.com/sluicehq/sluice/valkeytest"
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
	rule := sluice.Rule{Algorithm: driver.AlgorithmGCRA, Limit: 2, Interval: time.Millisecond}
	keys := []string{"{t}a", "{t}b", "{t}a", "{t}a"}
	var args []byte
	for range keys {
		op := driver.Op{Key: "k", Rule: rule, Cost: 1, Now: time.UnixMicro(now)}
		args = luascript.AppendArgs(args, &op, 0, 0, time.Time{})
	}
	sc := luascript.For(driver.AlgorithmGCRA)
	reply, err := c.Do(ctx, c.B().Eval().Script(sc.Src).Numkeys(int64(len(keys))).Key(keys...).Arg(string(args)).Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	// GCRA, burst 2, a token every millisecond, all at one instant: a
	// takes its two, b its first, a's third is refused.
	want := []struct {
		res     driver.Result
		receipt int64
	}{
		{driver.Result{Allowed: true, Remaining: 1, ResetAfter: time.Millisecond}, now + 1000},
		{driver.Result{Allowed: true, Remaining: 1, ResetAfter: time.Millisecond}, now + 1000},
		{driver.Result{Allowed: true, Remaining: 0, ResetAfter: 2 * time.Millisecond}, now + 2000},
		{driver.Result{RetryAfter: time.Millisecond, ResetAfter: 2 * time.Millisecond}, now + 2000},
	}
	n := 0
	err = luascript.DecodeCall(reply, len(keys), func(j int, res driver.Result, receipt int64, err error) {
		n++
		if err != nil || res != want[j].res || receipt != want[j].receipt {
			t.Errorf("decision %d: %+v receipt %d %v, want %+v receipt %d", j, res, receipt, err, want[j].res, want[j].receipt)
		}
	})
	if err != nil || n != len(keys) {
		t.Fatalf("%v after %d decisions", err, n)
	}
}

// TestStateLayout: the state the scripts pack under a key is what
// StateFields names and DecodeState reads, for every packed algorithm:
// one take at a known instant, then the key read back with GET.
func TestStateLayout(t *testing.T) {
	c := valkeytest.Start(t).Client(t)
	ctx := context.Background()
	const now = 1_764_000_000_123_456 // 2025-11-24 16:00:00.123456 UTC
	day := time.UnixMicro(now).UTC().Truncate(24 * time.Hour).UnixMicro()
	rule := func(p sluice.Policy) sluice.Rule {
		r, err := p.Rule()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, tc := range []struct {
		rule sluice.Rule
		want map[string]int64
	}{
		{rule(sluice.FixedWindow{Limit: 5, Window: time.Second}), map[string]int64{"w": now / 1_000_000, "c": 1}},
		{rule(sluice.FixedWindow{Limit: 5, Calendar: sluice.Calendar{Unit: sluice.Day, Zone: time.UTC}}), map[string]int64{"w": day, "c": 1}},
		{rule(sluice.SlidingWindow{Limit: 5, Window: time.Second}), map[string]int64{"w": now / 1_000_000, "c": 1, "p": 0}},
		{rule(sluice.TokenBucket{Capacity: 5, Rate: 5, Per: time.Second}), map[string]int64{"u": 4 * 200_000, "ts": now}},
	} {
		t.Run(tc.rule.String(), func(t *testing.T) {
			key := "{state}" + tc.rule.String()
			op := driver.Op{Key: key, Rule: tc.rule, Cost: 1, Now: time.UnixMicro(now)}
			sc := luascript.ForRule(&tc.rule)
			if err := c.Do(ctx, c.B().Eval().Script(sc.Src).Numkeys(1).Key(key).Arg(string(luascript.AppendArgs(nil, &op, 0, 0, time.Time{}))).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			v, err := c.Do(ctx, c.B().Get().Key(key).Build()).ToString()
			if err != nil {
				t.Fatal(err)
			}
			got, err := luascript.DecodeState(&tc.rule, v)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) || len(luascript.StateFields(&tc.rule)) != len(tc.want) {
				t.Errorf("state %v, want %v", got, tc.want)
			}
			for f, w := range tc.want {
				if got[f] != strconv.FormatInt(w, 10) {
					t.Errorf("%s = %s, want %d (state %v)", f, got[f], w, got)
				}
			}
		})
	}
}

// TestDecodeStateBad: a state of the wrong length, or of an algorithm that
// does not pack one, is an error, never a misread.
func TestDecodeStateBad(t *testing.T) {
	tb := sluice.Rule{Algorithm: driver.AlgorithmTokenBucket, Limit: 5, Interval: time.Second}
	for _, v := range []string{"", "1234567", string(make([]byte, 24))} {
		if m, err := luascript.DecodeState(&tb, v); err == nil {
			t.Errorf("DecodeState(%q) = %v, want an error", v, m)
		}
	}
	for _, alg := range []driver.Algorithm{driver.AlgorithmSlidingLog, driver.AlgorithmGCRA} {
		r := sluice.Rule{Algorithm: alg, Limit: 5, Interval: time.Second}
		if luascript.StateFields(&r) != nil {
			t.Errorf("%v: StateFields = %v, want nil", alg, luascript.StateFields(&r))
		}
		if m, err := luascript.DecodeState(&r, "12345678"); err == nil {
			t.Errorf("%v: DecodeState = %v, want an error", alg, m)
		}
	}
}
