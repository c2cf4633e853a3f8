package server

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/envoy"
	"github.com/sluicehq/sluice/driver"
)

// storeOf is the store that keeps p's counters: Options.PerSecond for the
// policies envoy.PerSecondPolicy selects when it is set, else
// Options.Store.
func (s *Server) storeOf(p *config.Policy) driver.Store {
	if s.opts.PerSecond != nil && envoy.PerSecondPolicy(p) {
		return s.opts.PerSecond
	}
	return s.opts.Store
}

// perSecondReady reports whether the per-second store, when there is one,
// answers.
func (s *Server) perSecondReady(ctx context.Context) error {
	p, ok := s.opts.PerSecond.(interface{ Ping(context.Context) error })
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := p.Ping(ctx); err != nil {
		return fmt.Errorf("per-second store: %w", err)
	}
	return nil
}
