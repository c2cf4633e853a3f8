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

const overrideYAML = `
policies:
  - {name: messages, algorithm: fixed_window, limit: 3, period: day, zone: America/Los_Angeles, overrides: true, plans: {pro: {limit: 5}}}
  - {name: plain, algorithm: fixed_window, limit: 3, window: 1h}
  - {name: win, algorithm: fixed_window, limit: 100, window: 1h, overrides: true}
`

// TestOverrideCommand: sluice override set, get, list and rm on one Valkey
// and on a Cluster; a decision made as sluice serve makes it sees the
// override; bad input exits 2 naming the flag.
func TestOverrideCommand(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "sluice.yaml")
	writeFile(t, cfgPath, overrideYAML)
	srv := valkeytest.Start(t)
	cl := valkeytest.StartCluster(t, 3)
	for _, tc := range []struct {
		name  string
		addrs []string
	}{
		{"standalone", []string{srv.Addr}},
		{"cluster", cl.Addrs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			va := strings.Join(tc.addrs, ",")
			key := "acme-" + tc.name + "-" + time.Now().Format("150405.000000")
			cmd := func(args ...string) (int, string, string) {
				return runCmd(append([]string{"override", args[0], "--config", cfgPath, "--valkey", va}, args[1:]...)...)
			}
			if code, out, errb := cmd("set", "--limit", "10", "--for", "1h", "--reason", "migration", "--actor", "ops", "messages", key); code != 0 || !strings.Contains(out, "limit 10 until") {
				t.Fatalf("set: %d %q %q", code, out, errb)
			}
			// get --json: one object, in the form of GET /v1/overrides; the
			// flag may follow the arguments.
			code, out, errb := cmd("get", "messages", key, "--json")
			var got map[string]any
			if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got["limit"] != 10.0 || got["reason"] != "migration" || got["actor"] != "ops" || got["key"] != key {
				t.Fatalf("get: %d %q %q", code, out, errb)
			}
			// A window is text, never nanoseconds, in get and list.
			if code, out, errb := cmd("set", "win", key, "--limit", "50", "--window", "10m", "--for", "1h"); code != 0 {
				t.Fatalf("set win: %d %q %q", code, out, errb)
			}
			code, out, errb = cmd("get", "win", key, "--json")
			if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got["window"] != "10m0s" {
				t.Fatalf("get win: %d %q %q, want window 10m0s", code, out, errb)
			}
			var list []map[string]any
			if code, out, _ := cmd("list", "win", "--json"); code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) == 0 || list[0]["window"] != "10m0s" {
				t.Fatalf("list win: %d %q", code, out)
			}
			if code, out, _ := cmd("list", "messages"); code != 0 || !strings.Contains(out, key) || !strings.Contains(out, "migration") {
				t.Fatalf("list: %d %q", code, out)
			}
			// A decision as sluice serve makes it.
			cfg, err := config.Load(cfgPath)
			if err != nil {
				t.Fatal(err)
			}
			c := srv.Client(t)
			if tc.name == "cluster" {
				c = cl.Client(t)
			}
			st, err := valkeystore.New(c)
			if err != nil {
				t.Fatal(err)
			}
			p := cfg.Policy("messages")
			l, err := sluice.New(st, p.Policy, sluice.WithName(p.Limiter), sluice.WithPrefix(cfg.Prefix), sluice.WithOverrides(true),
				sluice.WithPlan("pro", p.Plans[0].Policy), sluice.WithTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			res, err := l.AllowPlan(context.Background(), key, "pro", 4)
			if err != nil || !res.Allowed || res.Limit != 10 || res.Remaining != 6 || res.Source != sluice.SourceOverride {
				t.Fatalf("decision with the override: %+v %v", res, err)
			}
			if code, _, errb := cmd("rm", "messages", key); code != 0 {
				t.Fatalf("rm: %d %q", code, errb)
			}
			if code, _, _ := cmd("get", "messages", key); code != 1 {
				t.Fatalf("get after rm: %d", code)
			}
			// rm of a missing override removes nothing, says so, exits 1.
			if code, out, errb := cmd("rm", "messages", key); code != 1 || strings.Contains(out, "removed") || !strings.Contains(errb, "has no override") {
				t.Fatalf("rm of a missing override: %d %q %q, want exit 1", code, out, errb)
			}
			res, err = l.AllowPlan(context.Background(), key, "pro", 1)
			if err != nil || !res.Allowed || res.Limit != 5 || res.Remaining != 0 || res.Source != sluice.SourcePlan {
				t.Fatalf("decision after rm: %+v %v", res, err)
			}
		})
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"set", "--for", "1h", "messages", "k"}, "--limit is missing"},
		{[]string{"set", "--limit", "5", "messages", "k"}, "--expires or --for is required"},
		{[]string{"set", "--limit", "5", "--expires", "friday", "messages", "k"}, "not an RFC 3339 time"},
		{[]string{"set", "--limit", "5", "--expires", "2001-01-01T00:00:00Z", "messages", "k"}, "is not after now"},
		{[]string{"set", "--limit", "5", "--for", "1h", "plain", "k"}, "does not read key overrides"},
		{[]string{"set", "--limit", "5", "--for", "1h", "--rate", "5/s", "messages", "k"}, "rate is not for"},
		{[]string{"frob", "messages"}, `unknown subcommand "frob"`},
	} {
		code, _, errb := runCmd(append([]string{"override", tc.args[0], "--config", cfgPath, "--valkey", srv.Addr}, tc.args[1:]...)...)
		if code != 2 || !strings.Contains(errb, tc.want) {
			t.Errorf("%v: %d %q, want 2 and %q", tc.args, code, errb, tc.want)
		}
	}
}
