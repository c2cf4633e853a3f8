package valkeystore

import (
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/luascript"
	"github.com/sluicehq/sluice/valkeytest"
)

// TestCommandOwnsKeys builds the script calls of a lone decision and of a
// batch of three with keys in a buffer of the caller's, then overwrites
// the buffer, as a limiter does once Do returns (driver.TransientKeys): the
// commands, which valkey-go may still hold after a call timed out, keep
// the keys they were built with.
func TestCommandOwnsKeys(t *testing.T) {
	s, err := New(valkeytest.Start(t).Client(t))
	if err != nil {
		t.Fatal(err)
	}
	var _ driver.TransientKeys = s
	rule, err := sluice.GCRA{Rate: 1, Per: time.Second, Burst: 5}.Rule()
	if err != nil {
		t.Fatal(err)
	}
	sc := luascript.ForRule(&rule)
	for _, n := range []int{1, 3} {
		buf := make([]byte, 0, 64)
		batch := make([]driver.Op, n)
		var want []string
		c := call{alg: rule.Algorithm, sc: sc}
		for i := range batch {
			start := len(buf)
			buf = append(buf, "rl:v1:t:gcra:{user-"...)
			buf = append(buf, byte('a'+i), '}')
			k := unsafe.String(&buf[start], len(buf)-start)
			batch[i] = driver.Op{Key: k, Rule: rule, Cost: 1}
			want = append(want, string(buf[start:]))
			c.ops = append(c.ops, i)
		}
		cmd := s.e.command(batch, c, true)
		for i := range buf {
			buf[i] = 'x'
		}
		args := cmd.Commands()
		// EVALSHA sha numkeys keys... records
		if got := args[3 : 3+n]; !slices.Equal(got, want) {
			t.Errorf("%d decisions: keys %q after the caller's buffer was reused, want %q", n, got, want)
		}
	}
}
