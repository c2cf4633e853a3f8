package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
)

const denyCacheYAML = `
valkey:
  timeout: 2s
admin:
  token_env: SLUICE_ADMIN_TOKEN
policies:
  - {name: lock, algorithm: gcra, burst: 2, rate: 1/h}
`

// TestE2EResetReachesEveryProcess: two sluice serve processes on one
// Valkey both refuse a key from their deny caches (its state is deleted
// behind their backs and they still refuse); a reset, by the CLI or by
// the admin DELETE on one of them, makes both allow the key's next
// request within the documented bound (500ms; polled for 5s), on a
// standalone server and on a cluster.
func TestE2EResetReachesEveryProcess(t *testing.T) {
	const token = "e2e-admin-token-denycache-7a1f"
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	writeFile(t, cfg, denyCacheYAML)
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) (string, valkey.Client)
	}{
		{"standalone", func(t *testing.T) (string, valkey.Client) {
			v := valkeytest.Start(t)
			return v.Addr, v.Client(t)
		}},
		{"cluster", func(t *testing.T) (string, valkey.Client) {
			c := valkeytest.StartCluster(t, 3)
			return strings.Join(c.Addrs, ","), c.Client(t)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs, raw := tc.start(t)
			env := []string{"SLUICE_ADMIN_TOKEN=" + token}
			procs := []*proc{
				serve(t, env, "--config", cfg, "--valkey", addrs),
				serve(t, env, "--config", cfg, "--valkey", addrs),
			}
			for _, p := range procs {
				waitReady(t, p)
			}
			st, err := valkeystore.New(raw)
			if err != nil {
				t.Fatal(err)
			}
			taker, err := sluice.New(st, sluice.GCRA{Rate: 1, Per: time.Hour, Burst: 2}, sluice.WithName("lock.gcra"), sluice.WithDenyCache(false))
			if err != nil {
				t.Fatal(err)
			}
			check := func(p *proc, key string) bool {
				_, m := post(t, p.HTTP+"/v1/check", `{"policy":"lock","key":"`+key+`"}`)
				return m["allowed"] == true
			}
			for _, how := range []string{"cli", "admin"} {
				key := "user-" + how
				storeKey := "rl:v1:lock.gcra:gcra:{" + key + "}"
				// Both refuse from their caches: refused, then the state
				// deleted with no notice, and still refused by both.
				deadline := time.Now().Add(5 * time.Second)
				for {
					for check(procs[0], key) || check(procs[1], key) {
					}
					check(procs[0], key)
					check(procs[1], key)
					if err := raw.Do(context.Background(), raw.B().Del().Key(storeKey).Build()).Error(); err != nil {
						t.Fatal(err)
					}
					if !check(procs[0], key) && !check(procs[1], key) {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the two processes never both answered from their deny caches within 5s")
					}
					time.Sleep(20 * time.Millisecond)
				}
				// The state is back: the burst taken, as by a third process.
				if res, err := taker.AllowN(context.Background(), key, 2); err != nil || !res.Allowed {
					t.Fatalf("taking the burst: %+v %v", res, err)
				}
				start := time.Now()
				switch how {
				case "cli":
					code, stdout, stderr := sluiceCmd(t, "reset", "--config", cfg, "--valkey", addrs, "lock", key)
					if code != 0 || !strings.Contains(stdout, "the notice reached 2 subscribed") {
						t.Fatalf("sluice reset: exit %d\n%s%s", code, stdout, stderr)
					}
					t.Logf("sluice reset: %s", strings.TrimSpace(stdout))
				case "admin":
					code, m := request(t, "DELETE", procs[0].HTTP+"/v1/keys/lock/"+key, "", token)
					if code != 200 || m["notified"] != 2.0 || m["notice_bound_ms"] != 500.0 {
						t.Fatalf("DELETE: %d %v", code, m)
					}
				}
				returned := time.Since(start)
				for i, p := range procs {
					for !check(p, key) {
						if time.Since(start) > 5*time.Second {
							t.Fatalf("%s reset: process %d still refuses 5s after it", how, i)
						}
						time.Sleep(time.Millisecond)
					}
					t.Logf("%s reset: process %d allowed %v after the reset was sent (it returned after %v)", how, i, time.Since(start), returned)
				}
			}
		})
	}
}
