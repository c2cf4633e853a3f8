package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateConfigCalendar: validate-config accepts calendar quotas and
// names the field of a bad zone or renewal day.
func TestValidateConfigCalendar(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte("policies:\n  - {name: daily, algorithm: fixed_window, limit: 10000, period: day, zone: America/Los_Angeles}\n"), 0o644)
	os.WriteFile(bad, []byte("policies:\n  - {name: a, algorithm: fixed_window, limit: 1, period: day, zone: Mars/Olympus}\n  - {name: b, algorithm: fixed_window, limit: 1, period: month, zone: UTC, renewal_day: 32}\n"), 0o644)
	if code, stdout, stderr := runCmd("validate-config", good); code != 0 || !strings.Contains(stdout, "ok: 1 policies") {
		t.Errorf("good: %d %q %q", code, stdout, stderr)
	}
	code, _, stderr := runCmd("validate-config", bad)
	if code != 1 || !strings.Contains(stderr, `bad.yaml:2:69: policy "a": zone: unknown time zone "Mars/Olympus"`) ||
		!strings.Contains(stderr, "bad.yaml:3:89: renewal_day must be between 1 and 31, got 32") {
		t.Errorf("bad: %d %q", code, stderr)
	}
}
