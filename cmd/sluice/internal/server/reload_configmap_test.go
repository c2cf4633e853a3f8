package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/valkeytest/syncbuf"
)

// TestWatchConfigMapFile: a configuration file that is one file of a
// ConfigMap volume (a link to ..data/sluice.yaml, ..data a link to the
// current version's directory), as the Helm chart and deploy/kubernetes
// mount it, is reloaded each time the kubelet swaps ..data, though the file
// itself is never written. Fails when the watcher ignores ..data.
func TestWatchConfigMapFile(t *testing.T) {
	dir := t.TempDir()
	policy := func(name string) string {
		return "policies:\n  - {name: " + name + ", algorithm: fixed_window, limit: 1, window: 1s}\n"
	}
	write(t, filepath.Join(dir, "..v1", "sluice.yaml"), policy("first"))
	swapLink(t, "..v1", filepath.Join(dir, "..data"))
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.Symlink(filepath.Join("..data", "sluice.yaml"), path); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	s, err := New(cfg, Options{Store: memstore.New(), Logger: slog.New(slog.NewTextHandler(logs, nil)), Env: testEnv})
	if err != nil {
		t.Fatal(err)
	}
	s.SetLoaded([]byte(policy("first")))
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); s.Watch(ctx, path) }()
	defer func() { cancel(); wg.Wait() }()
	time.Sleep(100 * time.Millisecond) // the watch is set up

	// Twice: after the first swap the file resolves to a new directory.
	for i, name := range []string{"second", "third"} {
		prev, next := fmt.Sprintf("..v%d", i+1), fmt.Sprintf("..v%d", i+2)
		write(t, filepath.Join(dir, next, "sluice.yaml"), policy(name))
		swapLink(t, next, filepath.Join(dir, "..data"))
		if err := os.RemoveAll(filepath.Join(dir, prev)); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the swapped version's policy "+name, logs, func() bool { return s.Config().Policy(name) != nil })
	}
}
