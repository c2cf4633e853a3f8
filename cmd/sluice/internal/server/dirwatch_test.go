package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/valkeytest/syncbuf"
)

// limitFile is an envoyproxy/ratelimit file of domain d limiting key k to
// rpu an hour.
func limitFile(rpu int) string {
	return fmt.Sprintf("domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: hour, requests_per_unit: %d}}\n", rpu)
}

// watchedDir serves the configuration directory dir, watched, with a poll
// so slow (an hour) that only the watch can pick a change up within the
// test. It returns the server, a function answering the limit now in
// force for domain d's key k, and the log.
func watchedDir(t *testing.T, dir string) (*Server, func() uint32, *syncbuf.Buffer) {
	t.Helper()
	return watchedDirPoll(t, dir, time.Hour)
}

// watchedDirPoll is watchedDir with the given poll interval.
func watchedDirPoll(t *testing.T, dir string, poll time.Duration) (*Server, func() uint32, *syncbuf.Buffer) {
	t.Helper()
	o := config.DirOptions{}
	cfg, sum, err := config.LoadDir(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	s, err := New(cfg, Options{Store: memstore.New(), Logger: slog.New(slog.NewTextHandler(logs, nil)),
		ConfigDir: &o, DirPoll: poll})
	if err != nil {
		t.Fatal(err)
	}
	s.SetLoadedSum(sum)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Watch(ctx, dir) }()
	t.Cleanup(func() { cancel(); <-done })
	limit := func() uint32 {
		r, err := s.envoy.Decide(context.Background(), &rlsv3.RateLimitRequest{Domain: "d",
			Descriptors: []*commonrl.RateLimitDescriptor{desc("k", "v")}, HitsAddend: 0})
		if err != nil {
			t.Fatal(err)
		}
		return r.Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	return s, limit, logs
}

// eventually waits for cond, failing after a bound wide enough for a
// loaded machine (a correctness bound: with an hour's poll, only the watch
// can make cond true at all).
func eventually(t *testing.T, what string, logs *syncbuf.Buffer, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen within 20s\n%s", what, logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// swapLink points link at target atomically (a new link renamed over the
// old), as Kubernetes swaps a ConfigMap's "..data".
func swapLink(t *testing.T, target, link string) {
	t.Helper()
	tmp := link + ".tmp"
	os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
}

// TestDirWatchConfigMap: a directory laid out as Kubernetes mounts a
// ConfigMap (each file a link into "..data", itself a link to the current
// version) is reloaded when "..data" is swapped, and a bad version is
// refused, logged and counted while the last good one keeps serving, until
// a good one comes.
func TestDirWatchConfigMap(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "..v1", "a.yaml"), limitFile(5))
	swapLink(t, "..v1", filepath.Join(dir, "..data"))
	if err := os.Symlink(filepath.Join("..data", "a.yaml"), filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	s, limit, logs := watchedDir(t, dir)
	if got := limit(); got != 5 {
		t.Fatalf("initial limit %d, want 5", got)
	}

	// The first change may be read when the watch starts (what changed
	// before it was set up is read then); every later one only through
	// the watch.
	write(t, filepath.Join(dir, "..v2", "a.yaml"), limitFile(7))
	swapLink(t, "..v2", filepath.Join(dir, "..data"))
	eventually(t, "the swapped ConfigMap (limit 7)", logs, func() bool { return limit() == 7 })

	failures := s.metrics.reloads.WithLabelValues("failure")
	write(t, filepath.Join(dir, "..v3", "a.yaml"), "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: fortnight, requests_per_unit: 1}}\n")
	swapLink(t, "..v3", filepath.Join(dir, "..data"))
	eventually(t, "the bad version refused", logs, func() bool { return testutil.ToFloat64(failures) >= 1 })
	if n := metricValue(t, s.Registry(), "ratelimit_service_config_load_error"); n < 1 {
		t.Errorf("ratelimit_service_config_load_error = %v after a bad version", n)
	}
	if got := limit(); got != 7 {
		t.Errorf("after a bad version the limit is %d, want the last good 7", got)
	}
	if last := s.lastReload.Load(); last == nil || !strings.Contains(last.err, "a.yaml:3:") {
		t.Errorf("the dashboard's last reload does not show the refusal: %+v", last)
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "a.yaml:3:") {
		t.Errorf("the refusal is not logged with its position:\n%s", l)
	}

	write(t, filepath.Join(dir, "..v4", "a.yaml"), limitFile(9))
	swapLink(t, "..v4", filepath.Join(dir, "..data"))
	eventually(t, "a good version after a bad one (limit 9)", logs, func() bool { return limit() == 9 })
	if last := s.lastReload.Load(); last == nil || last.err != "" {
		t.Errorf("the dashboard's last reload does not show the success: %+v", last)
	}
}

// TestDirWatchRuntimeRoot: envoyproxy/ratelimit's runtime layout,
// root/current/ratelimit/config with "current" a link swapped to a new
// version, is reloaded on the swap, and watched afresh after it: an edit
// in place of a file of the new version, and a file added to it, are seen
// too.
func TestDirWatchRuntimeRoot(t *testing.T) {
	root := t.TempDir()
	cfgDir := func(v string) string { return filepath.Join(root, v, "ratelimit", "config") }
	write(t, filepath.Join(cfgDir("v1"), "a.yaml"), limitFile(5))
	swapLink(t, filepath.Join(root, "v1"), filepath.Join(root, "current"))
	s, limit, logs := watchedDir(t, filepath.Join(root, "current", "ratelimit", "config"))
	if got := limit(); got != 5 {
		t.Fatalf("initial limit %d, want 5", got)
	}

	// The first change may be read when the watch starts (what changed
	// before it was set up is read then); every later one only through
	// the watch.
	write(t, filepath.Join(cfgDir("v2"), "a.yaml"), limitFile(6))
	swapLink(t, filepath.Join(root, "v2"), filepath.Join(root, "current"))
	eventually(t, "the swapped root (limit 6)", logs, func() bool { return limit() == 6 })
	write(t, filepath.Join(cfgDir("v3"), "a.yaml"), limitFile(4))
	swapLink(t, filepath.Join(root, "v3"), filepath.Join(root, "current"))
	eventually(t, "the root swapped again (limit 4)", logs, func() bool { return limit() == 4 })

	write(t, filepath.Join(cfgDir("v3"), "a.yaml"), limitFile(8))
	eventually(t, "an edit in place in the new version (limit 8)", logs, func() bool { return limit() == 8 })

	// A second file merging nothing: a domain of its own, "e".
	write(t, filepath.Join(cfgDir("v3"), "b.yaml"), strings.Replace(limitFile(3), "domain: d", "domain: e", 1))
	eventually(t, "a file added (domain e)", logs, func() bool { return s.Config().Domain("e") != nil })
}

// TestDirPollBackstop: a change no watch can see (a file linking outside
// the directory, its target edited in place) is read by the poll that
// backs the watch.
func TestDirPollBackstop(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	write(t, filepath.Join(outside, "a.yaml"), limitFile(5))
	if err := os.Symlink(filepath.Join(outside, "a.yaml"), filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	_, limit, logs := watchedDirPoll(t, dir, 50*time.Millisecond)
	if got := limit(); got != 5 {
		t.Fatalf("initial limit %d, want 5", got)
	}
	// The first change may be read when the watch starts; the second only
	// by the poll.
	write(t, filepath.Join(outside, "a.yaml"), limitFile(6))
	eventually(t, "the link's target edited (limit 6)", logs, func() bool { return limit() == 6 })
	write(t, filepath.Join(outside, "a.yaml"), limitFile(7))
	eventually(t, "the link's target edited again (limit 7)", logs, func() bool { return limit() == 7 })
}
