package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/valkeytest"
)

func TestMain(m *testing.M) { valkeytest.Main(m) }

// The example prints the same table on the in-process store and on Valkey.
func TestRun(t *testing.T) {
	want := []string{
		"fixed_window        10/10    10/10      1/20  none",
		"sliding_log         10/10     0/10      1/20  retry after 980ms, fully reset after 980ms",
		"sliding_window      10/10     0/10     10/20  retry after 90ms, fully reset after 990ms",
		"token_bucket        10/10     0/10     10/20  retry after 80ms, fully reset after 980ms",
		"gcra                10/10     0/10     10/20  retry after 80ms, fully reset after 980ms",
	}
	for _, addr := range []string{"", valkeytest.Shared(t).Addr} {
		var out bytes.Buffer
		if err := run(&out, addr); err != nil {
			t.Fatalf("run(%q): %v", addr, err)
		}
		for _, line := range want {
			if !strings.Contains(out.String(), line) {
				t.Errorf("run(%q): output lacks %q:\n%s", addr, line, out.String())
			}
		}
	}
}
