package server

import (
	"encoding/json"
	"fmt"
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

// TestUIStateWarnings: /ui/state.json lists the policies with warn_at or
// wait, with sluice_warnings_total and sluice_server_waits_total, and the
// requests waiting now; a policy with neither is not listed.
func TestUIStateWarnings(t *testing.T) {
	_, ts := newTestServer(t, strings.Replace(warnYAML, "forward_auth:", `  - {name: patient, algorithm: gcra, burst: 1, rate: 1/m, wait: 1s}
  - {name: plain, algorithm: gcra, burst: 1, rate: 1/m}
forward_auth:`, 1))
	for range 4 {
		do(t, "POST", ts.URL+"/v1/check", `{"policy":"api","key":"k"}`)
	}
	for range 2 {
		do(t, "POST", ts.URL+"/v1/check", `{"policy":"patient","key":"k"}`) // the second: refused, its wait would pass 1s
	}
	var st struct {
		Warnings []struct {
			Name     string         `json:"name"`
			WarnAt   int            `json:"warn_at"`
			WaitMS   int64          `json:"wait_ms"`
			Warnings int64          `json:"warnings"`
			Waits    map[string]int `json:"waits"`
		} `json:"warnings"`
		Waiting *int `json:"waiting"`
	}
	r := do(t, "GET", ts.URL+"/ui/state.json", "")
	if err := json.Unmarshal([]byte(r.raw), &st); err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("%+v", st.Warnings)
	want := "[{Name:api WarnAt:75 WaitMS:0 Warnings:2 Waits:map[abandoned:0 admitted:0 full:0 refused:0]} " +
		"{Name:quiet WarnAt:50 WaitMS:0 Warnings:0 Waits:map[abandoned:0 admitted:0 full:0 refused:0]} " +
		"{Name:patient WarnAt:0 WaitMS:1000 Warnings:0 Waits:map[abandoned:0 admitted:0 full:0 refused:1]}]"
	if got != want || st.Waiting == nil || *st.Waiting != 0 {
		t.Fatalf("warnings %s, waiting %v\nwant %s", got, st.Waiting, want)
	}
}
