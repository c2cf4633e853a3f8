package config

import (
	"strings"
	"testing"
)

// TestDenyCacheField: deny_cache is on by default where it applies, off
// by default under count_rejected, overrides and plans, may be turned off
// anywhere, and asked for where it cannot apply is an error naming why.
func TestDenyCacheField(t *testing.T) {
	c, err := Parse("d.yaml", []byte(`policies:
  - {name: a, algorithm: gcra, burst: 5, rate: 1/s}
  - {name: b, algorithm: gcra, burst: 5, rate: 1/s, deny_cache: false}
  - {name: c, algorithm: gcra, burst: 5, rate: 1/s, deny_cache: true}
  - {name: d, algorithm: sliding_log, limit: 5, window: 1m, count_rejected: true}
  - {name: e, algorithm: fixed_window, limit: 5, window: 1m, overrides: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"a": true, "b": false, "c": true, "d": false, "e": false} {
		if got := c.Policy(name).DenyCache; got != want {
			t.Errorf("policy %s: DenyCache %v, want %v", name, got, want)
		}
	}
	for _, bad := range []string{
		"{name: x, algorithm: sliding_log, limit: 5, window: 1m, count_rejected: true, deny_cache: true}",
		"{name: x, algorithm: fixed_window, limit: 5, window: 1m, overrides: true, deny_cache: true}",
		"{name: x, algorithm: fixed_window, limit: 5, window: 1m, plans: {pro: {limit: 9}}, deny_cache: true}",
		"{name: x, algorithm: gcra, burst: 5, rate: 1/s, deny_cache: sometimes}",
	} {
		_, err := Parse("bad.yaml", []byte("policies:\n  - "+bad+"\n"))
		if err == nil || !strings.Contains(err.Error(), "deny_cache") {
			t.Errorf("%s: %v, want an error about deny_cache", bad, err)
		}
	}
}
