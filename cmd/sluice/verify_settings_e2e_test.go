package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/valkeytest"
)

// TestE2EVerifyFailsOnEvictingPolicy: sluice verify against a real
// valkey-server started with --maxmemory-policy allkeys-lru exits 1 and
// names the setting and its fix (before, only doctor caught it).
func TestE2EVerifyFailsOnEvictingPolicy(t *testing.T) {
	srv := valkeytest.Start(t, "--maxmemory-policy", "allkeys-lru")
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfg, "policies:\n  - {name: api, algorithm: gcra, burst: 5, rate: 50/s}\n")
	code, stdout, stderr := sluiceCmd(t, "verify", "--config", cfg, "--valkey", srv.Addr, "--processes", "2", "--goroutines", "2",
		"--margin", "1500ms", "--blackhole-wait", "3s")
	if code != 1 || !strings.Contains(stderr, "FAIL: settings/maxmemory-policy on "+srv.Addr) ||
		!strings.Contains(stdout, "FAIL maxmemory-policy") || !strings.Contains(stdout, "fix: maxmemory-policy noeviction") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}
