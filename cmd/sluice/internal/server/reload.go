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
	if err == nil {
		sum := sha256.Sum256(data)
		s.applyMu.Lock()
		same := bytes.Equal(sum[:], s.lastSum[:]) && s.lastSumSet
		s.applyMu.Unlock()
		if same {
			if s.recordRevert() {
				s.log.Info("configuration back to the one being served; the last rejection no longer applies", "file", path, "reason", reason)
			} else {
				s.log.Debug("configuration unchanged", "file", path, "reason", reason)
			}
			return nil
		}
	}
	var cfg *config.Config
	if err == nil {
		cfg, err = config.Parse(path, data)
	}
	if err == nil {
		err = s.Apply(cfg)
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
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	dir := filepath.Dir(path)
	if err := w.Add(dir); err != nil {
		return err
	}
	base := filepath.Base(path)
	real, _ := filepath.EvalSymlinks(path)
	var timer *time.Timer
	var fire <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if !concernsFile(ev, base, real) {
				continue
			}
			timer = restartDebounce(timer)
			fire = timer.C
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			s.log.Warn("watching the configuration file", "file", path, "err", err)
		case <-fire:
			fire = nil
			if s.reloadIfPresent(path) {
				real, _ = filepath.EvalSymlinks(path)
			}
		}
	}
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
