package server

import "github.com/sluicehq/sluice/cmd/sluice/internal/config"

// ApplyPushed applies a configuration pushed to the service (xDS) rather
// than read from a file: as Reload does with a file's, it is applied, or
// rejected (err, from decoding, or from building it) with the last good
// configuration serving on; either way recorded and counted as a reload.
// It returns the error that rejected it.
func (s *Server) ApplyPushed(cfg *config.Config, err error) error {
	if err == nil {
		err = s.Apply(cfg)
	}
	s.recordReload(err)
	if err != nil {
		return err
	}
	s.log.Info("configuration applied", "source", cfg.Source, "policies", len(cfg.Policies), "domains", len(cfg.Domains))
	return nil
}
