package server

import (
	"bytes"
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/config"
)

// Reloading a configuration directory (Options.ConfigDir): read again when
// any file in it changes, or when a directory on its path is swapped (a
// Kubernetes ConfigMap update swaps a symbolic link).

// DirPollInterval is how often a configuration directory is read for
// changes: every name on its path is resolved afresh each time, so a
// symbolic link swapped anywhere on it is seen.
const DirPollInterval = time.Second

func (s *Server) reloadDir(dir, reason string) error {
	sum, err := config.DirFingerprint(dir, *s.opts.ConfigDir)
	if err == nil {
		s.applyMu.Lock()
		same := s.lastSumSet && bytes.Equal(sum, s.lastSum[:])
		s.applyMu.Unlock()
		if same {
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
	if err != nil {
		s.metrics.reloads.WithLabelValues("failure").Inc()
		s.metrics.reloadOK.Set(0)
		s.log.Error("configuration rejected; the last good configuration keeps serving",
			"dir", dir, "reason", reason, "err", err.Error())
		return err
	}
	s.SetLoadedSum(sum)
	s.metrics.reloads.WithLabelValues("success").Inc()
	s.metrics.reloadOK.Set(1)
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
	t := time.NewTicker(DirPollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.reloadDir(dir, "directory changed")
		}
	}
}
