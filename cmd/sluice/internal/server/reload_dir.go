package server

import (
	"bytes"
	"context"
	"time"

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
	if err == nil {
		s.applyMu.Lock()
		same := s.lastSumSet && bytes.Equal(sum, s.lastSum[:])
		s.applyMu.Unlock()
		if same {
			if s.recordRevert() {
				s.log.Info("configuration back to the one being served; the last rejection no longer applies", "dir", dir, "reason", reason)
			}
			return nil
		}
	}
	var cfg *config.Config
	if err == nil {
		cfg, sum, err = config.LoadDir(dir, *s.opts.ConfigDir)
	}
	if err == nil {
		err = s.Apply(cfg)
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

// SetLoadedSum records the fingerprint of the configuration directory
// being served (config.LoadDir's), so that reloads skip unchanged ones.
func (s *Server) SetLoadedSum(sum []byte) {
	s.applyMu.Lock()
	copy(s.lastSum[:], sum)
	s.lastSumSet = len(sum) == len(s.lastSum)
	s.applyMu.Unlock()
}

func (s *Server) watchDir(ctx context.Context, dir string) error {
	poll := s.opts.DirPoll
	if poll <= 0 {
		poll = DirPollInterval
	}
	w, err := watchPath(dir)
	if err != nil {
		s.log.Warn("cannot watch the configuration directory; reading it every second instead", "dir", dir, "err", err.Error())
		poll = min(poll, dirUnwatchedPoll)
	}
	defer func() { w.close() }()
	// What changed between the load and the watch is read now.
	s.reloadDir(dir, "directory changed before it was watched")
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	settle := time.NewTimer(dirSettle)
	settle.Stop()
	defer settle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			s.reloadDir(dir, "directory read (poll)")
		case ev, ok := <-w.events():
			if !ok {
				s.log.Warn("the configuration directory's watch ended; reading it every second instead", "dir", dir)
				w.close()
				w = nil
				ticker.Reset(min(poll, dirUnwatchedPoll))
				continue
			}
			if w.relevant(ev) {
				settle.Reset(dirSettle)
			}
		case err, ok := <-w.errors():
			if !ok {
				continue // the events channel closes too and says so
			}
			// An overflow lost events: read the directory to be sure.
			s.log.Warn("watching the configuration directory", "dir", dir, "err", err.Error())
			settle.Reset(dirSettle)
		case <-settle.C:
			// The path may lead elsewhere now (a link swapped): watch it
			// afresh before reading, so that no later change is missed.
			if nw, err := watchPath(dir); err == nil {
				w.close()
				w = nw
			} else {
				s.log.Warn("watching the configuration directory afresh failed; the old watch and the poll go on", "dir", dir, "err", err.Error())
			}
			s.reloadDir(dir, "directory changed")
		}
	}
}
