package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
)

const penaltyKeysYAML = `
policies:
  - {name: login, algorithm: fixed_window, limit: 1, window: 720h,
     penalty: {after: 2, within: 1m, block: 10m, max_block: 40m, forgive: 24h}}
`

// TestE2EPenalty: sluice inspect shows a blocked key's block, its level
// and the time left; sluice reset lifts the block, through the binary, on
// a real Valkey.
func TestE2EPenalty(t *testing.T) {
	t.Parallel()
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfgPath, penaltyKeysYAML)
	srv := valkeytest.Start(t)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	st, err := valkeystore.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Policy("login")
	l, err := sluice.New(st, p.Policy, sluice.WithName(p.Limiter), sluice.WithPrefix(cfg.Prefix), sluice.WithTimeout(5*time.Second), sluice.WithPenalty(*p.Penalty))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 3 { // allowed, refused, refused: blocked for 10 minutes
		if _, err := l.Allow(ctx, "203.0.113.7"); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (int, string, string) {
		t.Helper()
		code, stdout, stderr := sluiceCmd(t, append(args[:1:1], append([]string{"--config", cfgPath, "--valkey", srv.Addr}, args[1:]...)...)...)
		noStackTrace(t, strings.Join(args, " "), stderr)
		return code, stdout, stderr
	}
	code, stdout, stderr := run("inspect", "login", "203.0.113.7")
	if code != 0 || !strings.Contains(stdout, "penalty    blocked for 9m") || !strings.Contains(stdout, "(block level 1)") || !strings.Contains(stdout, "level forgotten in 24h9m") {
		t.Fatalf("inspect: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, _ = run("inspect", "--json", "login", "203.0.113.7")
	var js struct {
		Allowed bool
		Penalty *struct {
			Blocked     bool
			BlockLeftMS float64 `json:"block_left_ms"`
			Level       int64
		}
	}
	if err := json.Unmarshal([]byte(stdout), &js); err != nil || code != 0 || js.Allowed || js.Penalty == nil || !js.Penalty.Blocked ||
		js.Penalty.Level != 1 || js.Penalty.BlockLeftMS <= 540_000 || js.Penalty.BlockLeftMS > 600_000 {
		t.Fatalf("inspect --json: exit %d, %v\n%s", code, err, stdout)
	}
	if code, stdout, stderr := run("reset", "login", "203.0.113.7"); code != 0 || !strings.Contains(stdout, "state deleted") {
		t.Fatalf("reset: exit %d\n%s%s", code, stdout, stderr)
	}
	if res, err := l.Allow(ctx, "203.0.113.7"); err != nil || !res.Allowed {
		t.Fatalf("after sluice reset: %+v %v", res, err)
	}
	if code, stdout, _ := run("inspect", "login", "203.0.113.7"); code != 0 || strings.Contains(stdout, "penalty") {
		t.Fatalf("inspect after reset: exit %d\n%s", code, stdout)
	}
}
