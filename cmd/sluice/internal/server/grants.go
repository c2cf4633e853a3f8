package server

import (
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
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
	a, b := p.limiter.GrantStats(), p.shadow.GrantStats()
	return sluice.GrantStats{Calls: a.Calls + b.Calls, Taken: a.Taken + b.Taken, Renewed: a.Renewed + b.Renewed,
		Granted: a.Granted + b.Granted, Returned: a.Returned + b.Returned, Expired: a.Expired + b.Expired,
		Local: a.Local + b.Local, Store: a.Store + b.Store, Failed: a.Failed + b.Failed, Mixed: a.Mixed + b.Mixed,
		Keys: a.Keys + b.Keys}
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
			keep[p.cfg.Limiter] = addStats(s.grants.carried[p.cfg.Limiter], final[p.cfg.Limiter])
		}
	}
	s.grants.carried = keep // the limiters no longer served are dropped
}

func addStats(a, b sluice.GrantStats) sluice.GrantStats {
	return sluice.GrantStats{Calls: a.Calls + b.Calls, Taken: a.Taken + b.Taken, Renewed: a.Renewed + b.Renewed,
		Granted: a.Granted + b.Granted, Returned: a.Returned + b.Returned, Expired: a.Expired + b.Expired,
		Local: a.Local + b.Local, Store: a.Store + b.Store, Failed: a.Failed + b.Failed, Mixed: a.Mixed + b.Mixed}
}

// grantCollector exports, at each scrape, the grants of the policies
// served (Limiter.GrantStats, counted across reloads), by limiter:
//
//	sluice_grant_calls_total{limiter}                 grant calls to Valkey (takes, renewals, give-backs)
//	sluice_grants_total{limiter, event}               grants taken (holding none) and renewed
//	sluice_grant_units_total{limiter, event}          units granted, returned, expired unspent
//	sluice_grant_decisions_total{limiter, where}      decisions made locally, on Valkey (waited for a call), failed (the fail mode)
//	sluice_grant_mixed_total{limiter}                 calls that found the key decided without grants too
//	sluice_grant_keys{limiter}                        keys holding grant state in this process
type grantCollector struct {
	s                                            *Server
	mu                                           sync.Mutex
	carried                                      map[string]sluice.GrantStats
	calls, grants, units, decisions, mixed, keys *prometheus.Desc
}

func newGrantCollector(s *Server) *grantCollector {
	l := []string{"limiter"}
	return &grantCollector{s: s,
		calls:     prometheus.NewDesc("sluice_grant_calls_total", "Grant calls to Valkey of policies with grants: takes, renewals and give-backs.", l, nil),
		grants:    prometheus.NewDesc("sluice_grants_total", "Grants obtained: taken (for a key holding none) or renewed.", append(l, "event"), nil),
		units:     prometheus.NewDesc("sluice_grant_units_total", "Units of grants: granted, returned (a quiet key, an eviction, a reload) or expired unspent.", append(l, "event"), nil),
		decisions: prometheus.NewDesc("sluice_grant_decisions_total", "Decisions of policies with grants: local (against the grant, no call), valkey (waited for a grant call) or failed (the call failed: on_failure decided).", append(l, "where"), nil),
		mixed:     prometheus.NewDesc("sluice_grant_mixed_total", "Grant calls that found the key's plain state: some process decides the policy without grants, enforcing the limit twice.", l, nil),
		keys:      prometheus.NewDesc("sluice_grant_keys", "Keys holding grant state in this process.", l, nil),
	}
}

func (c *grantCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.calls, c.grants, c.units, c.decisions, c.mixed, c.keys} {
		ch <- d
	}
}

func (c *grantCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.s.state.Load()
	if st == nil {
		return
	}
	for _, p := range st.order {
		if p.cfg.Grants {
			c.collect(ch, p.cfg.Limiter, addStats(c.carried[p.cfg.Limiter], p.grantStats()), p.grantStats().Keys)
		}
	}
}

// collect sends the metrics of one limiter.
func (c *grantCollector) collect(ch chan<- prometheus.Metric, name string, g sluice.GrantStats, keys int64) {
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{name}, labels...)...)
	}
	counter(c.calls, g.Calls)
	counter(c.grants, g.Taken, "taken")
	counter(c.grants, g.Renewed, "renewed")
	counter(c.units, g.Granted, "granted")
	counter(c.units, g.Returned, "returned")
	counter(c.units, g.Expired, "expired")
	counter(c.decisions, g.Local, "local")
	counter(c.decisions, g.Store, "valkey")
	counter(c.decisions, g.Failed, "failed")
	counter(c.mixed, g.Mixed)
	ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(keys), name)
}
