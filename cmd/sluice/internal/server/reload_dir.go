package server

import (
	"context"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
)

// Reloading a configuration directory (Options.ConfigDir): read again when
// anything in it changes, or when a directory or link on its path is
// swapped (a Kubernetes ConfigMap update swaps a symbolic link, "..data"
// in the directory; a runtime root may swap "current" above it). The
// directory and every directory above it are watched (dirwatch.go); a
// slow poll backs the watch.

// DirPollInterval is how often a watched configuration directory is read
// besides its watch: the backstop for what a watch cannot see (a file
// linking outside the directory edited in place, file systems that send no
// notifications). Without a watch (it could not be set up) the directory
// is read every second.
const DirPollInterval = 10 * time.Second

// dirUnwatchedPoll is how often a directory that cannot be watched is read.
const dirUnwatchedPoll = time.Second

// dirSettle is how long a watched directory must stay quiet after an event
// before it is read: an update is several renames and writes.
const dirSettle = 100 * time.Millisecond

func (s *Server) reloadDir(dir, reason string) error {
	sum, err := config.DirFingerprint(dir, *s.opts.ConfigDir)
	if err == nil && s.isServed(sum) {
		if s.recordRevert() {
			s.log.Info("configuration back to the one being served; the last rejection no longer applies", "dir", dir, "reason", reason)
		}
		return nil
	}
	var cfg *config.Config
	if err == nil {
		cfg, sum, err = s.applyDir(dir)
	}
	s.recordReload(err)
	if err != nil {
		s.log.Error("configuration rejected; the last good configuration keeps serving",
			"dir", dir, "reason", reason, "err", err.Error())
		return err
	}
	s.SetLoadedSum(sum)
	s.log.Info("configuration reloaded", "dir", dir, "reason", reason, "domains", len(cfg.Domains))
	return nil
}

// applyDir loads the configuration directory dir and applies it; sum is
// its fingerprint.
func (s *Server) applyDir(dir string) (cfg *config.Config, sum []byte, err error) {
	cfg, sum, err = config.LoadDir(dir, *s.opts.ConfigDir)
	if err != nil {
		return nil, nil, err
	}
	return cfg, sum, s.Apply(cfg)
}

// SetLoadedSum records the fingerprint of the configuration directory
// being served (config.LoadDir's), so that reloads skip unchanged ones.
func (s *Server) SetLoadedSum(sum []byte) {
	s.applyMu.Lock()
	copy(s.lastSum[:], sum)
	s.lastSumSet = len(sum) == len(s.lastSum)
	s.applyMu.Unlock()
}

func (s *Server) watchDir(ctx context.Context, dir string) error {
	dw := s.startDirWatch(dir)
	defer dw.stop()
	// What changed between the load and the watch is read now.
	s.reloadDir(dir, "directory changed before it was watched")
	for dw.step(ctx) {
	}
	return nil
}

// dirWatcher is watchDir under way: the watch of the directory's path
// (nil when it cannot be watched), the poll and the settle timer.
type dirWatcher struct {
	s      *Server
	dir    string
	poll   time.Duration
	w      *dirWatch
	ticker *time.Ticker
	settle *time.Timer
}

// startDirWatch starts watching the path of dir, or, when it cannot be
// watched, reading dir every second at least.
func (s *Server) startDirWatch(dir string) *dirWatcher {
	dw := &dirWatcher{s: s, dir: dir, poll: s.opts.DirPoll}
	if dw.poll <= 0 {
		dw.poll = DirPollInterval
	}
	w, err := watchPath(dir)
	if err != nil {
		s.log.Warn("cannot watch the configuration directory; reading it every second instead", "dir", dir, "err", err.Error())
		dw.poll = min(dw.poll, dirUnwatchedPoll)
	}
	dw.w = w
	dw.ticker = time.NewTicker(dw.poll)
	dw.settle = time.NewTimer(dirSettle)
	dw.settle.Stop()
	return dw
}

// stop stops the watch, the poll and the settle timer.
func (dw *dirWatcher) stop() {
	dw.w.close()
	dw.ticker.Stop()
	dw.settle.Stop()
}

// step handles what comes first, until ctx ends (false): the poll or the
// directory settled (both read it), an event or a watch error (which
// restart the settle timer).
func (dw *dirWatcher) step(ctx context.Context) bool {
	select {
	case <-dw.ticker.C:
		dw.s.reloadDir(dw.dir, "directory read (poll)")
	case ev, ok := <-dw.w.events():
		dw.event(ev, ok)
	case err, ok := <-dw.w.errors():
		if ok {
			// An overflow lost events: read the directory to be sure.
			dw.s.log.Warn("watching the configuration directory", "dir", dw.dir, "err", err.Error())
			dw.settle.Reset(dirSettle)
		} // else the events channel closes too and says so
	case <-dw.settle.C:
		dw.settled()
	case <-ctx.Done():
		return false
	}
	return true
}

// event restarts the settle timer when ev may change the directory; the
// end of the watch (!ok) leaves the poll, every second at least.
func (dw *dirWatcher) event(ev fsnotify.Event, ok bool) {
	if !ok {
		dw.s.log.Warn("the configuration directory's watch ended; reading it every second instead", "dir", dw.dir)
		dw.w.close()
		dw.w = nil
		dw.ticker.Reset(min(dw.poll, dirUnwatchedPoll))
		return
	}
	if dw.w.relevant(ev) {
		dw.settle.Reset(dirSettle)
	}
}

// settled reads the directory once it has stayed quiet. The path may lead
// elsewhere now (a link swapped): it is watched afresh before the read,
// so that no later change is missed.
func (dw *dirWatcher) settled() {
	if nw, err := watchPath(dw.dir); err == nil {
		dw.w.close()
		dw.w = nw
	} else {
		dw.s.log.Warn("watching the configuration directory afresh failed; the old watch and the poll go on", "dir", dw.dir, "err", err.Error())
	}
	dw.s.reloadDir(dw.dir, "directory changed")
}
