package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// TestWirestatsSmoke measures two targets briefly against a valkey-server
// of its own: a row per target, each serial decision one script call, read
// and write.
func TestWirestatsSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts valkey-server")
	}
	var out bytes.Buffer
	err := run([]string{"-targets", "sluice/gcra,valkeylimiter", "-conc", "1", "-duration", "200ms",
		"-rounds", "1", "-keys", "100", "-call-timeout", "1s"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, line := range strings.Split(out.String(), "\n") {
		if !strings.HasPrefix(line, "| sluice gcra | 1 |") && !strings.HasPrefix(line, "| valkeylimiter fixed_window | 1 |") {
			continue
		}
		rows++
		f := strings.Split(line, "|")
		// reads/dec, writes/dec: one each for a serial decision, plus the
		// few the round's own set-up and statistics cost, which show as
		// 0.01 when a loaded machine makes only a few thousand decisions.
		r, _ := strconv.ParseFloat(strings.TrimSpace(f[4]), 64)
		w, _ := strconv.ParseFloat(strings.TrimSpace(f[5]), 64)
		if r < 1 || r > 1.02 || w < 1 || w > 1.02 {
			t.Errorf("reads %v writes %v per decision, want 1.00 each (at most 1.02): %s", r, w, line)
		}
		if !strings.Contains(f[8], "evalsha 1.00") {
			t.Errorf("commands %q lack one EVALSHA per decision", f[8])
		}
	}
	if rows != 2 {
		t.Errorf("%d rows, want 2:\n%s", rows, &out)
	}
}

func TestWirestatsFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-conc", "0"}, {"-targets", "nope"}, {"-duration", "0s"}, {"-rounds", "0"}, {"extra"},
	} {
		if err := run(args, &bytes.Buffer{}); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
