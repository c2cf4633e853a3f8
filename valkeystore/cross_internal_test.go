package valkeystore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
)

// errorReply returns a server's error reply msg (from a real server).
func errorReply(t *testing.T, msg string) valkey.ValkeyResult {
	t.Helper()
	c := valkeytest.Shared(t).Client(t)
	r := c.Do(context.Background(), c.B().Eval().Script("return redis.error_reply(ARGV[1])").Numkeys(0).Arg(msg).Build())
	if _, ok := valkey.IsValkeyErr(r.Error()); !ok {
		t.Fatalf("not an error reply: %v", r.Error())
	}
	return r
}

// TestSplit: only the calls listed to be sent again are; a cross call
// among them becomes one call per slot with its decisions in order, the
// others keep their replies; a call that timed out is never listed, so it
// stays as it was.
func TestSplit(t *testing.T) {
	var batch []driver.Op
	keyOf := map[uint16][]int{}
	for i := 0; len(keyOf) < 3 || len(batch) < 8; i++ {
		k := fmt.Sprint("k", i)
		sl := slot(k)
		if len(keyOf) == 3 && keyOf[sl] == nil {
			continue
		}
		keyOf[sl] = append(keyOf[sl], len(batch))
		batch = append(batch, driver.Op{Key: k})
	}
	all := make([]int, len(batch))
	for i := range all {
		all[i] = i
	}
	calls := []call{
		{ops: all, cross: true},           // refused: NOTLOCAL
		{ops: []int{0}, slot: slot("k0")}, // timed out: not listed
		{ops: all, cross: true},           // timed out: not listed
	}
	resps := []valkey.ValkeyResult{
		errorReply(t, "NOTLOCAL Script attempted to access a non local key"),
		valkey.NewErrorResult(context.DeadlineExceeded),
		valkey.NewErrorResult(context.DeadlineExceeded),
	}
	out, outResps, again, wait := split(batch, calls, resps, pick(resps, notRun))
	if wait {
		t.Error("wait after NOTLOCAL alone")
	}
	if len(out) != 2+len(keyOf) || len(outResps) != len(out) {
		t.Fatalf("%d calls, %d replies, want %d", len(out), len(outResps), 2+len(keyOf))
	}
	for i := range 2 { // the timed-out calls, unchanged
		if !errors.Is(outResps[i].Error(), context.DeadlineExceeded) || !slices.Equal(out[i].ops, calls[i+1].ops) || out[i].cross != calls[i+1].cross {
			t.Errorf("call %d changed: %+v", i, out[i])
		}
	}
	if !slices.Equal(again, []int{2, 3, 4}) {
		t.Errorf("sent again %v, want [2 3 4]", again)
	}
	seen := map[uint16]bool{}
	for _, c := range out[2:] {
		if c.cross || seen[c.slot] || !slices.Equal(c.ops, keyOf[c.slot]) {
			t.Errorf("piece %+v, want the ops %v of slot %d, not cross", c, keyOf[c.slot], c.slot)
		}
		seen[c.slot] = true
	}
	// Any other refusal waits before the retry.
	resps = []valkey.ValkeyResult{errorReply(t, "READONLY You can't write against a read only replica.")}
	if _, _, _, wait := split(batch, calls[:1], resps, []int{0}); !wait {
		t.Error("no wait after READONLY")
	}
}
