package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
)

// Reload reads the configuration file path again and applies it. A file
// that does not load, or whose policies cannot be built, is rejected:
// logged, counted in sluice_server_config_reloads_total{result="failure"},
// and the last good configuration keeps serving. A file identical to the
// one being served is not applied again; after a rejected file, reverting
// to the served one is a successful reload (recorded as one, so that the
// alert and the dashboard's error clear).
func (s *Server) Reload(path, reason string) error {
	if s.opts.ConfigDir != nil {
		return s.reloadDir(path, reason)
	}
	data, err := os.ReadFile(path)
	if err == nil && s.isServed(sumOf(data)) {
		s.fileUnchanged(path, reason)
		return nil
	}
	var cfg *config.Config
	if err == nil {
		cfg, err = s.applyFile(path, data)
	}
	s.recordReload(err)
	if err != nil {
		s.log.Error("configuration rejected; the last good configuration keeps serving",
			"file", path, "reason", reason, "err", err.Error())
		return err
	}
	s.SetLoaded(data)
	s.log.Info("configuration reloaded", "file", path, "reason", reason, "policies", len(cfg.Policies), "domains", len(cfg.Domains))
	return nil
}

// sumOf is the fingerprint of a configuration file's contents.
func sumOf(data []byte) []byte {
	sum := sha256.Sum256(data)
	return sum[:]
}

// isServed reports whether sum is the fingerprint of the configuration
// being served.
func (s *Server) isServed(sum []byte) bool {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	return s.lastSumSet && bytes.Equal(sum, s.lastSum[:])
}

// fileUnchanged logs a reload of the file being served: a revert after a
// rejection (recordRevert), or no change.
func (s *Server) fileUnchanged(path, reason string) {
	if s.recordRevert() {
		s.log.Info("configuration back to the one being served; the last rejection no longer applies", "file", path, "reason", reason)
		return
	}
	s.log.Debug("configuration unchanged", "file", path, "reason", reason)
}

// applyFile parses data, read from path, and applies it.
func (s *Server) applyFile(path string, data []byte) (*config.Config, error) {
	cfg, err := config.Parse(path, data)
	if err != nil {
		return nil, err
	}
	return cfg, s.Apply(cfg)
}

// recordReload records a reload's outcome, of a file or a directory alike:
// for the dashboard's last reload, and counted under Sluice's metrics and
// envoyproxy/ratelimit's. A file or directory that does not decode, and a
// configuration that cannot be built, are both failures.
func (s *Server) recordReload(err error) {
	s.lastReload.Store(&reloadResult{at: time.Now().UTC(), err: errString(err)})
	s.countReload(err)
}

// countReload counts a reload's outcome in the metrics.
func (s *Server) countReload(err error) {
	if err != nil {
		s.metrics.reloads.WithLabelValues("failure").Inc()
		s.metrics.reloadOK.Set(0)
		s.envoy.ConfigLoaded(false)
		return
	}
	s.metrics.reloads.WithLabelValues("success").Inc()
	s.metrics.reloadOK.Set(1)
	s.envoy.ConfigLoaded(true)
}

// recordRevert is called when the file or directory on disk is the one
// being served: if the last reload was rejected, the source has been put
// back to the served configuration, and that is a successful reload
// (recorded, and true returned). Otherwise nothing changed and nothing is
// recorded, so that polls of an unchanged directory count nothing.
func (s *Server) recordRevert() bool {
	last := s.lastReload.Load()
	if last == nil || last.err == "" {
		return false
	}
	// Once, should a signal and the watcher both read the file.
	if !s.lastReload.CompareAndSwap(last, &reloadResult{at: time.Now().UTC()}) {
		return false
	}
	s.countReload(nil)
	return true
}

// reloadResult is the outcome of one Reload, for the dashboard.
type reloadResult struct {
	at  time.Time
	err string // "" on success
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// SetLoaded records the contents of the file being served, so that Reload
// can skip unchanged files.
func (s *Server) SetLoaded(data []byte) {
	s.applyMu.Lock()
	s.lastSum = sha256.Sum256(data)
	s.lastSumSet = true
	s.applyMu.Unlock()
}

// Watch reloads path whenever it changes, until ctx ends. It watches the
// file's directory, so that editors that replace the file (write a new one
// and rename it) and Kubernetes ConfigMap updates (a symlink swap) are seen;
// events are debounced by 200ms.
func (s *Server) Watch(ctx context.Context, path string) error {
	if s.opts.ConfigDir != nil {
		return s.watchDir(ctx, path)
	}
	fw, err := s.watchFile(path)
	if err != nil {
		return err
	}
	defer fw.stop()
	for fw.step(ctx) {
	}
	return nil
}

// fileWatch is Watch under way: the watch of the file's directory, the
// file's name and the target it links to, and the debounce timer.
type fileWatch struct {
	s                *Server
	w                *fsnotify.Watcher
	path, base, real string
	timer            *time.Timer
	fire             <-chan time.Time // the timer's, while it runs
}

// watchFile starts watching the directory of the file at path.
func (s *Server) watchFile(path string) (*fileWatch, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	if err := w.Add(filepath.Dir(path)); err != nil {
		w.Close()
		return nil, err
	}
	fw := &fileWatch{s: s, w: w, path: path, base: filepath.Base(path)}
	fw.real, _ = filepath.EvalSymlinks(path)
	return fw, nil
}

// stop stops the timer and the watch.
func (fw *fileWatch) stop() {
	if fw.timer != nil {
		fw.timer.Stop()
	}
	fw.w.Close()
}

// step waits for the next thing to happen and handles it: an event (which
// restarts the debounce), a watch error (logged), the debounce's end (a
// reload). It returns false when the watch ends, with ctx or the watcher.
func (fw *fileWatch) step(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case ev, ok := <-fw.w.Events:
		if !ok {
			return false
		}
		fw.event(ev)
	case err, ok := <-fw.w.Errors:
		if !ok {
			return false
		}
		fw.s.log.Warn("watching the configuration file", "file", fw.path, "err", err)
	case <-fw.fire:
		fw.fire = nil
		if fw.s.reloadIfPresent(fw.path) {
			fw.real, _ = filepath.EvalSymlinks(fw.path)
		}
	}
	return true
}

// event (re)starts the debounce when ev concerns the file.
func (fw *fileWatch) event(ev fsnotify.Event) {
	if !concernsFile(ev, fw.base, fw.real) {
		return
	}
	fw.timer = restartDebounce(fw.timer)
	fw.fire = fw.timer.C
}

// concernsFile reports whether watch event ev (in the file's directory)
// may have changed the file named base: an event on the file itself, a
// Kubernetes-style "..data" symlink swap, or one on real, the target the
// file links to.
func concernsFile(ev fsnotify.Event, base, real string) bool {
	name := filepath.Base(ev.Name)
	return name == base || name == "..data" || ev.Name == real
}

// restartDebounce (re)starts Watch's 200ms debounce timer, creating it on
// the first event.
func restartDebounce(timer *time.Timer) *time.Timer {
	if timer == nil {
		return time.NewTimer(200 * time.Millisecond)
	}
	timer.Reset(200 * time.Millisecond)
	return timer
}

// reloadIfPresent reloads the file at path after a change and reports
// whether it did; a missing file (removed, or mid-replace) is waited
// for, as the next event brings it back.
func (s *Server) reloadIfPresent(path string) bool {
	if _, err := os.Stat(path); err != nil {
		s.log.Debug("configuration file missing, waiting", "file", path)
		return false
	}
	s.Reload(path, "file changed")
	return true
}
