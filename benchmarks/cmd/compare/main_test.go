package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestCompareSmoke runs the whole comparison, very briefly, against a
// valkey-server of its own.
func TestCompareSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts valkey-server and runs every library")
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{
		"-duration", "100ms", "-warmup", "0", "-keys", "200", "-mem-keys", "200", "-conc", "2", "-refused-conc", "2",
	}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", code, &errb)
	}
	report := out.String()
	for _, want := range []string{
		"### 100k keys", "### One hot key", "### Refused hot key", "### Bytes per key", "### Sluice vs the fastest peer",
		"| sluice | gcra |", "| sluice | sliding_log |", "| valkeylimiter |", "| redis_rate |", "| ulule |", "| throttled |",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(errb.String(), "left out") {
		t.Errorf("a target was left out:\n%s", &errb)
	}
}

func TestCompareFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-conc", "0"}, {"-targets", "nope"}, {"-scenarios", "fast"}, {"-duration", "0s"}, {"extra"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("run(%q) = %d, want 2", args, code)
		}
	}
}
