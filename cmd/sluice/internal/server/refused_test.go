package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
)

const refusedYAML = `
admin:
  token_env: SLUICE_TEST_TOKEN
policies:
  - {name: hashed, algorithm: fixed_window, limit: 1, window: 1h}
  - {name: raw, algorithm: fixed_window, limit: 1, window: 1h, show_keys: raw}
  - {name: cut, algorithm: fixed_window, limit: 1, window: 1h, show_keys: truncated}
  - {name: dark, algorithm: fixed_window, limit: 1, window: 1h, shadow: true, show_keys: raw}
`

// TestTopRefused: the most refused keys per policy, shown as the policy
// allows, behind the admin token, never in the metrics.
func TestTopRefused(t *testing.T) {
	_, ts := newTestServer(t, refusedYAML)
	secretKey := "alice@example.com"
	hit := func(policy, key string, n int) {
		for range n {
			r := do(t, "POST", ts.URL+"/v1/check", fmt.Sprintf(`{"policy":%q,"key":%q}`, policy, key))
			if r.code != 200 {
				t.Fatalf("check: %d %s", r.code, r.raw)
			}
		}
	}
	for _, p := range []string{"hashed", "raw", "cut", "dark"} {
		hit(p, secretKey, 6) // 5 refusals
		hit(p, "bob", 3)     // 2 refusals
		hit(p, "carol", 1)   // none
	}
	// The multi-check form counts too.
	do(t, "POST", ts.URL+"/v1/check", `{"checks":[{"policy":"raw","key":"dave"},{"policy":"raw","key":"dave"}]}`)

	auth := []string{"Authorization", "Bearer " + testToken}
	if r := do(t, "GET", ts.URL+"/v1/top-refused", ""); r.code != 401 || strings.Contains(r.raw, "alice") {
		t.Fatalf("without a token: %d %s", r.code, r.raw)
	}
	if r := do(t, "GET", ts.URL+"/v1/top-refused", "", "Authorization", "Bearer wrong-token-0123456789"); r.code != 401 || strings.Contains(r.raw, "wrong-token") {
		t.Fatalf("wrong token: %d %s", r.code, r.raw)
	}
	r := do(t, "GET", ts.URL+"/v1/top-refused?span=1m", "", auth...)
	if r.code != 200 {
		t.Fatalf("%d %s", r.code, r.raw)
	}
	var body struct {
		Policies []topRefused `json:"policies"`
	}
	json.Unmarshal([]byte(r.raw), &body)
	got := map[string]topRefused{}
	for _, p := range body.Policies {
		got[p.Policy] = p
	}
	if p := got["raw"]; len(p.Keys) != 3 || p.Keys[0].Item != secretKey || p.Keys[0].Count != 5 || p.Keys[1].Item != "bob" || p.Keys[1].Count != 2 ||
		p.Keys[2].Item != "dave" || p.Refused != 8 || p.ShowKeys != "raw" {
		t.Errorf("raw: %+v", p)
	}
	if p := got["hashed"]; len(p.Keys) != 2 || !strings.HasPrefix(p.Keys[0].Item, "h:") || p.Keys[0].Count != 5 || p.ShowKeys != "hashed" {
		t.Errorf("hashed: %+v", p)
	}
	if p := got["cut"]; len(p.Keys) != 2 || p.Keys[0].Item != "alice@…(17 bytes)" || p.Keys[1].Item != "bob" {
		t.Errorf("truncated: %+v", p)
	}
	// Shadow mode: what the limit would have refused.
	if p := got["dark"]; len(p.Keys) != 2 || p.Keys[0].Item != secretKey || p.Keys[0].Count != 5 {
		t.Errorf("shadow: %+v", p)
	}
	for name, p := range got {
		if name != "raw" && name != "dark" && strings.Contains(fmt.Sprint(p), "alice@example") {
			t.Errorf("%s shows the raw key: %+v", name, p)
		}
	}
	// Never metric labels.
	m := do(t, "GET", ts.URL+"/metrics", "")
	for _, k := range []string{"alice", "bob", "h:"} {
		if strings.Contains(m.raw, k) {
			t.Errorf("/metrics mentions %q", k)
		}
	}
	if r := do(t, "GET", ts.URL+"/v1/top-refused?policy=raw&n=1", "", auth...); r.code != 200 || strings.Contains(r.raw, "bob") || !strings.Contains(r.raw, "alice") {
		t.Errorf("one policy, n=1: %d %s", r.code, r.raw)
	}
	for _, q := range []string{"?span=1h", "?n=0", "?n=1000", "?policy=nope", "?colour=red"} {
		if r := do(t, "GET", ts.URL+"/v1/top-refused"+q, "", auth...); r.code/100 != 4 {
			t.Errorf("%s: %d", q, r.code)
		}
	}
}

func TestTopRefusedDegradedNotCounted(t *testing.T) {
	rk := newRefusedKeys()
	p := &config.Policy{Name: "p", ShowKeys: config.KeysRaw}
	rk.note(p, "a", sluice.Result{Degraded: true})
	rk.note(p, "b", sluice.Result{Allowed: true})
	rk.note(p, "c", sluice.Result{})
	top := rk.top(p, refusedSpans["5m"], "5m", 10)
	if len(top.Keys) != 1 || top.Keys[0].Item != "c" {
		t.Errorf("%+v", top)
	}
}

func TestShowKeysConfig(t *testing.T) {
	if _, err := config.Parse("t.yaml", []byte("policies:\n  - {name: a, algorithm: gcra, burst: 1, rate: 1/s, show_keys: plain}\n")); err == nil || !strings.Contains(err.Error(), "t.yaml:2:") {
		t.Errorf("show_keys: plain: %v", err)
	}
}

// TestTopRefusedForgetsRemovedPolicies: a reload that removes a policy
// drops its counts.
func TestTopRefusedForgetsRemovedPolicies(t *testing.T) {
	s, ts := newTestServer(t, refusedYAML)
	for range 3 {
		do(t, "POST", ts.URL+"/v1/check", `{"policy":"raw","key":"a"}`)
		do(t, "POST", ts.URL+"/v1/check", `{"policy":"hashed","key":"a"}`)
	}
	cfg, err := config.Parse("t.yaml", []byte("admin: {token_env: SLUICE_TEST_TOKEN}\npolicies:\n  - {name: raw, algorithm: fixed_window, limit: 1, window: 1h, show_keys: raw}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	s.refused.mu.Lock()
	_, hashed := s.refused.by["hashed"]
	_, raw := s.refused.by["raw"]
	s.refused.mu.Unlock()
	if hashed || !raw {
		t.Errorf("after the reload: hashed kept %v, raw kept %v", hashed, raw)
	}
}

// TestTopRefusedHashComputable: a hashed key is KeyHash(KeyHashSecret(admin
// token), key), the same in two servers sharing the token (not a
// per-process secret), so an operator can compute it from a raw key.
func TestTopRefusedHashComputable(t *testing.T) {
	want := KeyHash(KeyHashSecret(testToken), "ip:203.0.113.7")
	for range 2 {
		_, ts := newTestServer(t, refusedYAML)
		for range 2 {
			do(t, "POST", ts.URL+"/v1/check", `{"policy":"hashed","key":"ip:203.0.113.7"}`)
		}
		r := do(t, "GET", ts.URL+"/v1/top-refused?policy=hashed", "", "Authorization", "Bearer "+testToken)
		var body struct {
			Policies []topRefused `json:"policies"`
		}
		json.Unmarshal([]byte(r.raw), &body)
		if len(body.Policies) != 1 || len(body.Policies[0].Keys) != 1 || body.Policies[0].Keys[0].Item != want {
			t.Fatalf("top refused %s, want the key shown as %s", r.raw, want)
		}
		if !strings.Contains(body.Policies[0].Resolve, "sluice key") {
			t.Errorf("no way to resolve a hash in %s", r.raw)
		}
	}
	if KeyHash(KeyHashSecret("another-token-0123456789"), "ip:203.0.113.7") == want {
		t.Error("the hash does not depend on the admin token")
	}
}
