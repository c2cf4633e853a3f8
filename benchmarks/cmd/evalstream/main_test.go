package main

import (
	"bufio"
	"bytes"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/luascript"
	"github.com/sluicehq/sluice/valkeytest"
)

// readCommands parses RESP arrays of bulk strings.
func readCommands(t *testing.T, b []byte) [][]string {
	t.Helper()
	r := bufio.NewReader(bytes.NewReader(b))
	line := func() string {
		s, err := r.ReadString('\n')
		if err != nil || !strings.HasSuffix(s, "\r\n") {
			t.Fatalf("bad line %q: %v", s, err)
		}
		return s[:len(s)-2]
	}
	var cmds [][]string
	for {
		if _, err := r.Peek(1); err != nil {
			return cmds
		}
		h := line()
		n, err := strconv.Atoi(strings.TrimPrefix(h, "*"))
		if err != nil || h[0] != '*' {
			t.Fatalf("bad array header %q", h)
		}
		cmd := make([]string, n)
		for i := range cmd {
			l, err := strconv.Atoi(strings.TrimPrefix(line(), "$"))
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, l+2)
			if _, err := io.ReadFull(r, buf); err != nil || string(buf[l:]) != "\r\n" {
				t.Fatalf("bad bulk string: %v", err)
			}
			cmd[i] = string(buf[:l])
		}
		cmds = append(cmds, cmd)
	}
}

func stream(t *testing.T, form string, calls, keys, tags int, slots string, warm bool) [][]string {
	t.Helper()
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	if err := run(w, form, calls, keys, tags, slots, time.Microsecond, false, warm, 1); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	return readCommands(t, b.Bytes())
}

// TestStreamAsValkeystoreSends: each form's calls are valkeystore's, with
// records luascript writes, keys of the slots asked for.
func TestStreamAsValkeystoreSends(t *testing.T) {
	sc := luascript.For(driver.AlgorithmGCRA)
	op := driver.Op{Rule: sluice.Rule{Algorithm: driver.AlgorithmGCRA, Limit: 1_000_000, Interval: time.Microsecond}, Cost: 1}
	var rec []byte
	for range 16 {
		rec = luascript.AppendArgs(rec, &op, 0, 0, time.Time{})
	}
	if got := callRecords(16, time.Microsecond); !bytes.Equal(got, rec) {
		t.Fatalf("callRecords = %x, want %x", got, rec)
	}
	for _, c := range stream(t, "one", 5, 16, 0, "", false) {
		if len(c) != 3+16+1 || c[0] != "EVALSHA" || c[1] != sc.SHA || c[2] != "16" || c[19] != string(rec) {
			t.Fatalf("one: %q", c[:3])
		}
	}
	for _, c := range stream(t, "cross", 5, 16, 0, "100-5000", false) {
		if len(c) != 5+16+1 || c[0] != "EVALSHA" || c[1] != sc.Cross.SHA || c[2] != "0" || c[3] != "16" || c[4] != "16" || c[21] != string(rec) {
			t.Fatalf("cross: %q", c[:5])
		}
		for _, k := range c[5:21] {
			if s := valkeytest.Slot(k); s < 100 || s > 5000 {
				t.Fatalf("key %q of slot %d, outside 100-5000", k, s)
			}
		}
	}
	for _, c := range stream(t, "one", 3, 4, 1, "", false) {
		for _, k := range c[3:7] {
			if valkeytest.Slot(k) != valkeytest.Slot(c[3]) {
				t.Fatalf("-tags 1: keys %q and %q of different slots", k, c[3])
			}
		}
	}
	// -warm: every key once, in order.
	seen := map[string]bool{}
	for _, c := range stream(t, "one", 1, 16, 0, "", true) {
		for _, k := range c[3:19] {
			seen[k] = true
		}
	}
	if len(seen) != keySpace {
		t.Fatalf("-warm: %d keys, want %d", len(seen), keySpace)
	}
}

func TestStreamBadFlags(t *testing.T) {
	w := bufio.NewWriter(&bytes.Buffer{})
	for _, tc := range []struct {
		form, slots string
		calls       int
	}{{"two", "", 1}, {"one", "", 0}, {"one", "5-1", 1}, {"one", "0-16384", 1}, {"one", "x", 1}} {
		if err := run(w, tc.form, tc.calls, 16, 0, tc.slots, time.Microsecond, false, false, 1); err == nil {
			t.Errorf("-form %s -slots %q -calls %d: no error", tc.form, tc.slots, tc.calls)
		}
	}
}
