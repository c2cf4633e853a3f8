package server

import (
	"log/slog"
	"sync"

	"github.com/sluicehq/sluice"
)

// Grants across reloads and shutdown: the limiters of a policy with grants
// (grants: auto) hold units of its keys' limits. A reload builds new
// limiters (new holders); the old ones give their units back (Close) once
// the new configuration is served, so that a reload strands nothing until
// the grants' life ends. Requests still deciding on the old limiters go
// on: a closed limiter decides with one Valkey call per decision.

// closeGrants gives back the units every grant limiter of st holds, and
// returns each grant limiter's counters at that moment.
func (st *state) closeGrants(log *slog.Logger) map[string]sluice.GrantStats {
	out := map[string]sluice.GrantStats{}
	for _, p := range st.order {
		if !p.cfg.Grants {
			continue
		}
		for _, l := range []*sluice.Limiter{p.limiter, p.shadow} {
			if err := l.Close(); err != nil {
				log.Warn("grants: cannot give back units; they return when their grants end", "policy", p.cfg.Name, "err", err.Error())
			}
		}
		out[p.cfg.Limiter] = p.grantStats()
	}
	return out
}

// grantStats sums the counters of p's limiter and its shadow twin.
func (p *policy) grantStats() sluice.GrantStats {
	return p.limiter.GrantStats().Add(p.shadow.GrantStats())
}

// Close gives back the units the served configuration's grants hold
// (sluice serve calls it once it has stopped serving).
func (s *Server) Close() {
	if st := s.state.Load(); st != nil {
		st.closeGrants(s.log)
	}
}

// serve makes st the configuration served, and closes the grants of the
// one it replaces, keeping their counters so that the metrics of a limiter
// st still has never go back (scrapes wait meanwhile).
func (s *Server) serve(st *state) {
	s.grants.mu.Lock()
	defer s.grants.mu.Unlock()
	old := s.state.Swap(st)
	if old == nil {
		return
	}
	final := old.closeGrants(s.log)
	keep := map[string]sluice.GrantStats{}
	for _, p := range st.order {
		if p.cfg.Grants {
			keep[p.cfg.Limiter] = s.grants.carried[p.cfg.Limiter].Add(final[p.cfg.Limiter])
		}
	}
	// The limiters no longer served with grants leave carried; gone keeps
	// their counts, so that a limiter getting its grants back in a later
	// reload goes on from them: its counters never go back, over
	// Prometheus as over OTLP (whose cumulative sums keep their start
	// time and cannot show a reset).
	if s.grants.gone == nil {
		s.grants.gone = map[string]sluice.GrantStats{}
	}
	for _, m := range []map[string]sluice.GrantStats{s.grants.carried, final} {
		for name, st := range m {
			if _, ok := keep[name]; !ok {
				s.grants.gone[name] = s.grants.gone[name].Add(st)
			}
		}
	}
	s.grants.carried = keep
}

// grantCarry keeps, across reloads, the grant counters of the limiters
// a reload replaced (carried), and of those a reload stopped serving with
// grants (gone).
type grantCarry struct {
	mu      sync.Mutex
	carried map[string]sluice.GrantStats
	gone    map[string]sluice.GrantStats
}

// GrantStats is the grant counters of the policies served with grants,
// by limiter, counted across reloads (Keys: the keys held now), which
// sluice serve exports as the sluice_grant_* metrics (sluiceprom's
// Metrics.GrantsFunc) and over OTLP (sluiceotel's
// Observer.ObserveGrantsFunc): the counters of the limiters in use, plus
// those of the limiters they replaced, plus, for a limiter that lost its
// grants (or its policy) in a reload and has them again, the counts it
// had then. Its counters never go back.
func (s *Server) GrantStats() map[string]sluice.GrantStats {
	s.grants.mu.Lock()
	defer s.grants.mu.Unlock()
	st := s.state.Load()
	if st == nil {
		return nil
	}
	out := map[string]sluice.GrantStats{}
	for _, p := range st.order {
		if p.cfg.Grants {
			now := p.grantStats()
			sum := s.grants.carried[p.cfg.Limiter].Add(now).Add(s.grants.gone[p.cfg.Limiter])
			sum.Keys = now.Keys
			out[p.cfg.Limiter] = sum
		}
	}
	return out
}
