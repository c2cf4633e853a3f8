package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/valkeytest"
)

const inForceYAML = `
admin: {token_env: SLUICE_E2E_ADMIN_TOKEN}
policies:
  - name: api
    algorithm: fixed_window
    limit: 100
    window: 1h
    overrides: true
    plans:
      pro: {limit: 500}
  - {name: edge, algorithm: fixed_window, limit: 2, window: 1h}
forward_auth:
  trusted_proxies: [10.0.0.0/8]
  routes:
    - name: all
      limits:
        - {policy: edge, key: [header:X-Api-Key, client_ip]}
`

// TestE2EFromRefusedToReset: through a real sluice serve and Valkey, an
// operator with a raw API key finds what forward_auth counts for it, the
// hash the top refused keys show is the one sluice key computes, sluice
// keys --find turns that hash into the key, and inspect and reset take
// that key; inspect shows the rule in force (an override with its own
// window, a plan) as /v1/check answers it.
func TestE2EFromRefusedToReset(t *testing.T) {
	const token = "e2e-admin-token-inforce-0123"
	t.Setenv("SLUICE_E2E_ADMIN_TOKEN", token)
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfg, inForceYAML)
	v := valkeytest.Start(t)
	p := serve(t, []string{"SLUICE_E2E_ADMIN_TOKEN=" + token}, "--config", cfg, "--valkey", v.Addr)
	waitReady(t, p)
	base := []string{"--config", cfg, "--valkey", v.Addr}
	cmd := func(args ...string) (int, string, string) {
		t.Helper()
		code, stdout, stderr := sluiceCmd(t, append(args[:1:1], append(base, args[1:]...)...)...)
		noStackTrace(t, strings.Join(args, " "), stderr)
		return code, stdout, stderr
	}

	// Refuse an API key at forward auth.
	for i := range 4 {
		req, _ := http.NewRequest("GET", p.HTTP+"/v1/forward-auth", nil)
		req.Header.Set("X-Api-Key", "key_abc")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{true: 200, false: 429}[i < 2]; resp.StatusCode != want {
			t.Fatalf("forward auth %d: %d, want %d", i, resp.StatusCode, want)
		}
	}
	code, m := request(t, "GET", p.HTTP+"/v1/top-refused?policy=edge", "", token)
	pols, _ := m["policies"].([]any)
	if code != 200 || len(pols) != 1 {
		t.Fatalf("top refused: %d %v", code, m)
	}
	keys := pols[0].(map[string]any)["keys"].([]any)
	if len(keys) != 1 {
		t.Fatalf("top refused keys: %v", m)
	}
	shown := keys[0].(map[string]any)["key"].(string)

	// From the raw API key: the key as counted, and the hash shown.
	code, stdout, stderr := cmd("key", "header:X-Api-Key", "key_abc", "--json")
	var info struct{ Key, Hashed string }
	if code != 0 || json.Unmarshal([]byte(stdout), &info) != nil {
		t.Fatalf("key: exit %d\n%s%s", code, stdout, stderr)
	}
	if !strings.HasPrefix(info.Key, "header:x-api-key:") || info.Hashed != shown {
		t.Fatalf("sluice key: %+v, want the hash the top refused keys show, %s", info, shown)
	}
	// From the hash: the key, by sluice keys --find.
	code, stdout, stderr = cmd("keys", "--find", shown)
	if code != 0 || !strings.Contains(stdout, info.Key) || !strings.Contains(stdout, "edge") {
		t.Fatalf("keys --find %s: exit %d\n%s%s", shown, code, stdout, stderr)
	}
	if code, stdout, _ := cmd("keys", "--names", "--policy", "edge"); code != 0 || !strings.Contains(stdout, info.Key) {
		t.Fatalf("keys --names: exit %d\n%s", code, stdout)
	}
	if code, _, stderr := cmd("keys", "--find", "h:0000000000000000"); code != 1 || !strings.Contains(stderr, "no stored key") {
		t.Errorf("keys --find of an unknown hash: exit %d %q", code, stderr)
	}
	// Inspect and reset take that key.
	if code, stdout, _ := cmd("inspect", "edge", info.Key); code != 0 || !strings.Contains(stdout, "remaining  0 of 2") {
		t.Fatalf("inspect: exit %d\n%s", code, stdout)
	}
	if code, stdout, stderr := cmd("reset", "edge", info.Key); code != 0 {
		t.Fatalf("reset: exit %d\n%s%s", code, stdout, stderr)
	}
	req, _ := http.NewRequest("GET", p.HTTP+"/v1/forward-auth", nil)
	req.Header.Set("X-Api-Key", "key_abc")
	if resp, err := client.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("forward auth after reset: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// client_ip keys: the loopback peer's address.
	if code, stdout, _ := cmd("key", "client_ip", "127.0.0.1"); code != 0 || !strings.Contains(stdout, "key        ip:127.0.0.1\n") {
		t.Errorf("key client_ip: exit %d\n%s", code, stdout)
	}

	// The rule in force: 399 of 500 left under the plan, as inspect shows.
	for range 101 {
		post(t, p.HTTP+"/v1/check", `{"policy":"api","key":"acct-1","plan":"pro"}`)
	}
	_, m = post(t, p.HTTP+"/v1/check", `{"policy":"api","key":"acct-1","plan":"pro","cost":0}`)
	if m["remaining"] != 399.0 || m["source"] != "plan" {
		t.Fatalf("check under the plan: %v", m)
	}
	code, stdout, _ = cmd("inspect", "api", "acct-1", "--plan", "pro")
	if code != 0 || !strings.Contains(stdout, "remaining  399 of 500") || !strings.Contains(stdout, "in force   plan pro: fixed_window(limit=500") {
		t.Errorf("inspect --plan pro: exit %d\n%s", code, stdout)
	}
	// An override with its own window: inspect, /v1/check and its
	// headers agree on its limit and window.
	if code, stdout, stderr := sluiceCmd(t, append([]string{"override", "set"}, append(base, "api", "acct-1", "--limit", "300", "--window", "10m", "--for", "1h", "--reason", "e2e")...)...); code != 0 {
		t.Fatalf("override set: exit %d\n%s%s", code, stdout, stderr)
	}
	_, m = post(t, p.HTTP+"/v1/check", `{"policy":"api","key":"acct-1","cost":0}`)
	hdr, _ := m["headers"].(map[string]any)
	if m["source"] != "override" || m["limit"] != 300.0 || m["window_ms"] != 600000.0 || hdr["RateLimit-Policy"] != `"api";q=300;w=600` {
		t.Fatalf("check under the override: %v", m)
	}
	code, stdout, _ = cmd("inspect", "api", "acct-1", "--json")
	var st struct {
		Source    string
		Limit     int64
		Remaining int64
		WindowMS  int64  `json:"window_ms"`
		InForce   string `json:"rule_in_force"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &st) != nil || st.Source != "override" || st.Limit != 300 || st.WindowMS != 600000 ||
		st.Remaining != int64(m["remaining"].(float64)) || !strings.Contains(st.InForce, "window=10m") {
		t.Errorf("inspect under the override: exit %d %+v\n%s", code, st, stdout)
	}
	code, stdout, _ = cmd("inspect", "api", "acct-1")
	if !regexp.MustCompile(`in force   override until \S+ \(e2e\): fixed_window\(limit=300, window=10m0s\)`).MatchString(stdout) {
		t.Errorf("inspect under the override:\n%s", stdout)
	}
	// A key with no state: the limit in force, not the policy's.
	if code, _, stderr := cmd("inspect", "api", "nobody", "--plan", "pro"); code != 1 || !strings.Contains(stderr, "whole limit of 500 (plan pro)") {
		t.Errorf("inspect of a fresh key under a plan: exit %d %q", code, stderr)
	}
	// A reset says the limit the key gets back: the override's.
	if code, stdout, stderr := cmd("reset", "api", "acct-1"); code != 0 || !strings.Contains(stdout, "whole limit of 300 (the override's)") {
		t.Errorf("reset under the override: exit %d %q %q", code, stdout, stderr)
	}
}
