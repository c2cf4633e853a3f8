package main

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
)

// TestE2EInFlightKeys: sluice inspect shows an in_flight key's leases with
// their time left, and sluice reset frees the key (its leases are lost).
func TestE2EInFlightKeys(t *testing.T) {
	t.Parallel()
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfgPath, "policies:\n  - {name: exports, algorithm: in_flight, limit: 3, lease: 30s}\n")
	srv := valkeytest.Start(t)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	st, err := valkeystore.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Policy("exports")
	l, err := sluice.New(st, p.Policy, sluice.WithName(p.Limiter), sluice.WithPrefix(cfg.Prefix), sluice.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var ids []string
	var held []*sluice.Lease
	for range 2 {
		ls, _, err := l.Acquire(ctx, "tenant:42")
		if err != nil || ls == nil {
			t.Fatal(err)
		}
		ids, held = append(ids, ls.ID()), append(held, ls)
	}
	base := []string{"--config", cfgPath, "--valkey", srv.Addr}
	run := func(args ...string) (int, string, string) {
		t.Helper()
		code, stdout, stderr := sluiceCmd(t, append(args[:1:1], append(base, args[1:]...)...)...)
		noStackTrace(t, strings.Join(args, " "), stderr)
		return code, stdout, stderr
	}
	code, stdout, _ := run("inspect", "exports", "tenant:42")
	if code != 0 || !strings.Contains(stdout, "leases     2 held") || !strings.Contains(stdout, ids[0]+" ends in ") || !strings.Contains(stdout, "remaining  1 of 3") {
		t.Fatalf("inspect: exit %d\n%s", code, stdout)
	}
	code, stdout, _ = run("inspect", "--json", "exports", "tenant:42")
	var ks struct {
		Leases []struct {
			ID       string  `json:"id"`
			EndsInMS float64 `json:"ends_in_ms"`
		}
	}
	if err := json.Unmarshal([]byte(stdout), &ks); err != nil || code != 0 || len(ks.Leases) != 2 {
		t.Fatalf("inspect --json: exit %d, %v\n%s", code, err, stdout)
	}
	for _, ls := range ks.Leases {
		if !slices.Contains(ids, ls.ID) || ls.EndsInMS <= 0 || ls.EndsInMS > 30000 {
			t.Errorf("lease %+v, want one of %v ending within 30s", ls, ids)
		}
	}
	if code, stdout, stderr := run("reset", "exports", "tenant:42"); code != 0 {
		t.Fatalf("reset: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, _, stderr := run("inspect", "exports", "tenant:42"); code != 1 || !strings.Contains(stderr, "no state") {
		t.Fatalf("inspect after reset: exit %d, %q", code, stderr)
	}
	if err := held[0].Renew(ctx); !errors.Is(err, sluice.ErrLeaseLost) {
		t.Fatalf("renew after reset: %v, want ErrLeaseLost", err)
	}
}
