package server

import (
	"log/slog"
)

// Grants across reloads and shutdown: the limiters of a policy with grants
// (grants: auto) hold units of its keys' limits. A reload builds new
// limiters (new holders); the old ones give their units back (Close) once
// the new configuration is served, so that a reload strands nothing until
// the grants' life ends. Requests still deciding on the old limiters go
// on: a closed limiter decides with one Valkey call per decision.

// closeGrants gives back the units every grant limiter of st holds.
func (st *state) closeGrants(log *slog.Logger) {
	for _, p := range st.order {
		if !p.cfg.Grants {
			continue
		}
		for _, l := range []interface{ Close() error }{p.limiter, p.shadow} {
			if err := l.Close(); err != nil {
				log.Warn("grants: cannot give back units; they return when their grants end", "policy", p.cfg.Name, "err", err.Error())
			}
		}
	}
}

// Close gives back the units the served configuration's grants hold
// (sluice serve calls it once it has stopped serving).
func (s *Server) Close() {
	if st := s.state.Load(); st != nil {
		st.closeGrants(s.log)
	}
}
