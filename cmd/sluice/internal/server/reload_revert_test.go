package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/valkeytest/syncbuf"
	"net/http/httptest"
)

// TestReloadRevertClearsAlert: a bad edit, then the file put back as it
// was (the one still being served), picked up by the file watcher alone.
// The revert is a successful reload: the gauge goes back to 1 and the
// dashboard's error clears. Before, an unchanged file was skipped without
// recording anything, and the alert stayed on.
func TestReloadRevertClearsAlert(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	good := "policies:\n  - {name: api, algorithm: fixed_window, limit: 5, window: 1m}\n"
	bad := "policies:\n  - {name: api, algorithm: gcra, burst: 0, rate: 1/s}\n"
	write(t, path, good)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	s, err := New(cfg, Options{Store: memstore.New(), Logger: slog.New(slog.NewTextHandler(logs, nil)), Env: testEnv})
	if err != nil {
		t.Fatal(err)
	}
	s.SetLoaded([]byte(good))
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); s.Watch(ctx, path) }()
	defer func() { cancel(); wg.Wait() }()
	time.Sleep(100 * time.Millisecond) // the watch is set up

	state := func() dashReload {
		var st dashState
		if err := json.Unmarshal([]byte(do(t, "GET", ts.URL+"/ui/state.json", "").raw), &st); err != nil {
			t.Fatal(err)
		}
		return st.Config.Reload
	}
	replace := func(body string) {
		tmp := filepath.Join(dir, ".sluice.yaml.tmp")
		write(t, tmp, body)
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	failures := s.metrics.reloads.WithLabelValues("failure")

	replace(bad)
	eventually(t, "the bad edit refused", logs, func() bool { return testutil.ToFloat64(failures) == 1 })
	if m := do(t, "GET", ts.URL+"/metrics", "").raw; !strings.Contains(m, "\nsluice_server_config_last_reload_successful 0\n") {
		t.Fatal("the bad edit is not reported")
	}
	if r := state(); r.OK || r.Error == "" {
		t.Fatalf("the dashboard does not show the refusal: %+v", r)
	}

	replace(good)
	eventually(t, "the revert recorded as a successful reload", logs, func() bool {
		// (The metric's line, not its help text, which starts "1 when".)
		return strings.Contains(do(t, "GET", ts.URL+"/metrics", "").raw, "\nsluice_server_config_last_reload_successful 1\n")
	})
	if r := state(); !r.OK || r.Error != "" || r.Failures != 1 {
		t.Errorf("after the revert the dashboard shows %+v, want ok and no error", r)
	}
	// Unchanged afterwards: nothing more recorded.
	successes := testutil.ToFloat64(s.metrics.reloads.WithLabelValues("success"))
	if err := s.Reload(path, "test"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(s.metrics.reloads.WithLabelValues("success")); n != successes {
		t.Errorf("an unchanged file counted as another reload: %v -> %v", successes, n)
	}
}

// TestDirWatchRevertClearsAlert: the same for a configuration directory
// (a ConfigMap swapped to a bad version, then back to the served one).
func TestDirWatchRevertClearsAlert(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "..v1", "a.yaml"), limitFile(5))
	write(t, filepath.Join(dir, "..v2", "a.yaml"), "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: fortnight, requests_per_unit: 1}}\n")
	swapLink(t, "..v1", filepath.Join(dir, "..data"))
	if err := os.Symlink(filepath.Join("..data", "a.yaml"), filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	s, limit, logs := watchedDir(t, dir)
	failures := s.metrics.reloads.WithLabelValues("failure")
	swapLink(t, "..v2", filepath.Join(dir, "..data"))
	eventually(t, "the bad version refused", logs, func() bool { return testutil.ToFloat64(failures) >= 1 })
	if got := testutil.ToFloat64(s.metrics.reloadOK); got != 0 {
		t.Fatalf("last_reload_successful %v after a bad version", got)
	}
	swapLink(t, "..v1", filepath.Join(dir, "..data"))
	eventually(t, "the revert recorded as a successful reload", logs, func() bool { return testutil.ToFloat64(s.metrics.reloadOK) == 1 })
	if last := s.lastReload.Load(); last == nil || last.err != "" {
		t.Errorf("the dashboard's last reload still shows %+v", last)
	}
	if got := limit(); got != 5 {
		t.Errorf("limit %d, want 5", got)
	}
}
