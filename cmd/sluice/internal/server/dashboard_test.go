package server

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUIState: /ui/state.json carries the decisions counters, the reload
// outcome (with the rejected file's error) and no Valkey nodes for the
// in-process store.
func TestUIState(t *testing.T) {
	s, ts := newTestServer(t, testYAML)
	for range 5 {
		do(t, "POST", ts.URL+"/v1/check", `{"policy":"api","key":"k"}`)
	}
	state := func() dashState {
		t.Helper()
		r := do(t, "GET", ts.URL+"/ui/state.json", "")
		if r.code != 200 || !strings.Contains(r.header.Get("Content-Security-Policy"), "default-src 'none'") {
			t.Fatalf("%d %v", r.code, r.header)
		}
		var st dashState
		if err := json.Unmarshal([]byte(r.raw), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := state()
	var api *dashPolicy
	for i := range st.Policies {
		if st.Policies[i].Name == "api" {
			api = &st.Policies[i]
		}
	}
	if api == nil || api.Allowed != 3 || api.Refused != 2 || api.Degraded != 0 || len(api.Buckets) == 0 || api.Buckets[len(api.Buckets)-1].Count != 5 {
		t.Fatalf("api: %+v", api)
	}
	if !st.Ready || st.Store != "memory" || len(st.Nodes) != 0 || !st.Config.Reload.OK || !st.Config.Reload.At.IsZero() {
		t.Errorf("state: %+v", st)
	}
	// A rejected file: the reload's error is shown, the old config serves.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("policies:\n  - {name: a, algorithm: gcra, burst: 0, rate: 1/s}\n"), 0o644)
	if err := s.Reload(bad, "test"); err == nil {
		t.Fatal("bad file reloaded")
	}
	st = state()
	if st.Config.Reload.OK || st.Config.Reload.Failures != 1 || st.Config.Reload.At.IsZero() || !strings.Contains(st.Config.Reload.Error, "bad.yaml:2") || st.Config.Policies != 4 {
		t.Errorf("after a rejected reload: %+v", st.Config)
	}
}

// TestDecisionTimeoutGauge: each limiter's timeout is exported, and follows
// a reload.
func TestDecisionTimeoutGauge(t *testing.T) {
	s, ts := newTestServer(t, "valkey: {timeout: 80ms}\npolicies:\n  - {name: a, algorithm: gcra, burst: 1, rate: 1/s}\n  - {name: b, algorithm: gcra, burst: 1, rate: 1/s, timeout: 5ms}\n")
	m := do(t, "GET", ts.URL+"/metrics", "").raw
	for _, want := range []string{`sluice_server_decision_timeout_seconds{limiter="a.gcra"} 0.08`, `sluice_server_decision_timeout_seconds{limiter="b.gcra"} 0.005`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(cfg, []byte("policies:\n  - {name: c, algorithm: gcra, burst: 1, rate: 1/s}\n"), 0o644)
	if err := s.Reload(cfg, "test"); err != nil {
		t.Fatal(err)
	}
	m = do(t, "GET", ts.URL+"/metrics", "").raw
	if !strings.Contains(m, `sluice_server_decision_timeout_seconds{limiter="c.gcra"} 0.05`) || strings.Contains(m, `limiter="a.gcra"} 0.08`) {
		t.Errorf("after the reload: %s", grepMetric(m, "sluice_server_decision_timeout_seconds"))
	}
}

func grepMetric(m, name string) string {
	var out []string
	for _, l := range strings.Split(m, "\n") {
		if strings.HasPrefix(l, name) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
