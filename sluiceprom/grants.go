package sluiceprom

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice"
)

// The grants of limiters (sluice.WithGrants) are counted by the limiters
// themselves (Limiter.GrantStats): a decision against a grant calls no
// observer's store path, and the calls, units and keys are no decision's.
// Metrics reads them at each scrape, for the limiters given to Grants or
// the counters GrantsFunc returns, by limiter:
//
//	sluice_grant_calls_total{limiter}              counter  grant calls to the store: takes, renewals, give-backs
//	sluice_grants_total{limiter, event}            counter  grants taken (for a key holding none) or renewed
//	sluice_grant_units_total{limiter, event}       counter  units granted, returned, or expired unspent
//	sluice_grant_decisions_total{limiter, where}   counter  decisions local, after a call (valkey), or by the fail mode (failed)
//	sluice_grant_mixed_total{limiter}              counter  calls that found the key decided without grants too
//	sluice_grant_keys{limiter}                     gauge    keys holding grant state in this process
//
// sluice serve exports the same metrics, by the same code.

// The event and where labels' values of the grant metrics.
const (
	GrantTaken    = "taken"
	GrantRenewed  = "renewed"
	UnitsGranted  = "granted"
	UnitsReturned = "returned"
	UnitsExpired  = "expired"
	// WhereLocal: decided against the process's grant, without a call.
	WhereLocal = "local"
	// WhereValkey: waited for a grant call to the store (Valkey, for
	// sluice serve and valkeystore), as sluice serve names it.
	WhereValkey = "valkey"
	// WhereFailed: the grant call failed and the fail mode decided.
	WhereFailed = "failed"
)

// grantDescs are the grant metrics' descriptions and what they read.
type grantDescs struct {
	calls, grants, units, decisions, mixed, keys *prometheus.Desc

	mu      sync.Mutex
	sources []func() map[string]sluice.GrantStats
}

func newGrantDescs(c config) *grantDescs {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(c.namespace, "", name), help, append([]string{"limiter"}, labels...), c.labels)
	}
	return &grantDescs{
		calls:     desc("grant_calls_total", "Grant calls to the store of limiters with grants, by limiter: takes, renewals and give-backs."),
		grants:    desc("grants_total", "Grants obtained, by limiter and event: taken (for a key holding none) or renewed.", "event"),
		units:     desc("grant_units_total", "Units of grants, by limiter and event: granted, returned (a quiet key, an eviction, Close) or expired (the grant ended unspent).", "event"),
		decisions: desc("grant_decisions_total", "Decisions of limiters with grants, by limiter and where: local (against the grant, no call), valkey (waited for a grant call to the store) or failed (the call failed: the fail mode decided).", "where"),
		mixed:     desc("grant_mixed_total", "Grant calls that found the key's plain state: some process decides the limiter without grants, enforcing the limit twice."),
		keys:      desc("grant_keys", "Keys holding grant state in this process, by limiter."),
	}
}

// Grants exports the grant counters of limiters (sluice.WithGrants), read
// from Limiter.GrantStats at each scrape and labelled by their names
// (limiters of one name are summed). The Metrics keeps the limiters: give
// it limiters that live as long as it, and for limiters that come and go
// (rebuilt on a reload), GrantsFunc.
func (m *Metrics) Grants(limiters ...*sluice.Limiter) {
	ls := append([]*sluice.Limiter(nil), limiters...)
	m.GrantsFunc(func() map[string]sluice.GrantStats {
		out := make(map[string]sluice.GrantStats, len(ls))
		for _, l := range ls {
			out[l.Name()] = out[l.Name()].Add(l.GrantStats())
		}
		return out
	})
}

// GrantsFunc exports, at each scrape, the grant counters f returns by
// limiter name (summed with those of the other sources of the same name).
// For limiters replaced over time, f should carry the counters of the
// ones replaced (after their Close), so that the counters never go back;
// Keys is a gauge, the keys held now.
func (m *Metrics) GrantsFunc(f func() map[string]sluice.GrantStats) {
	m.grantDescs.mu.Lock()
	m.grantDescs.sources = append(m.grantDescs.sources, f)
	m.grantDescs.mu.Unlock()
}

func (g *grantDescs) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{g.calls, g.grants, g.units, g.decisions, g.mixed, g.keys} {
		ch <- d
	}
}

func (g *grantDescs) collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	sources := g.sources
	g.mu.Unlock()
	if len(sources) == 0 {
		return
	}
	all := map[string]sluice.GrantStats{}
	for _, f := range sources {
		for name, s := range f() {
			all[name] = all[name].Add(s)
		}
	}
	for name, s := range all {
		g.send(ch, name, s)
	}
}

// send sends the grant metrics of one limiter.
func (g *grantDescs) send(ch chan<- prometheus.Metric, name string, s sluice.GrantStats) {
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{name}, labels...)...)
	}
	counter(g.calls, s.Calls)
	counter(g.grants, s.Taken, GrantTaken)
	counter(g.grants, s.Renewed, GrantRenewed)
	counter(g.units, s.Granted, UnitsGranted)
	counter(g.units, s.Returned, UnitsReturned)
	counter(g.units, s.Expired, UnitsExpired)
	counter(g.decisions, s.Local, WhereLocal)
	counter(g.decisions, s.Store, WhereValkey)
	counter(g.decisions, s.Failed, WhereFailed)
	counter(g.mixed, s.Mixed)
	ch <- prometheus.MustNewConstMetric(g.keys, prometheus.GaugeValue, float64(s.Keys), name)
}
