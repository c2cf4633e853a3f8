package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice/valkeystore"
)

// valkeyHealth is what a Valkey store tells the metrics: its breakers per
// node, and the server settings it found at connection (ValkeyStore).
type valkeyHealth interface {
	Breakers() map[string]valkeystore.BreakerState
	Risks() ([]valkeystore.Risk, bool)
}

// valkeyCollector exports, at each scrape, of every Valkey the server
// decides on (the store, and the per-second store of REDIS_PERSECOND):
//
//	sluice_valkey_breaker_state{node, state}            1 for the node's breaker's state, 0 for the others
//	sluice_valkey_config_risk{node, setting, value}     1 per server setting that loses counts or refuses decisions
//	sluice_valkey_config_checked                        1 when every node's settings could be read (CONFIG allowed)
//
// A node of the per-second store is named perSecondNode + its address.
type valkeyCollector struct {
	srcs    []valkeySource
	breaker *prometheus.Desc
	risk    *prometheus.Desc
	checked *prometheus.Desc
}

// valkeySource is one store's health, its nodes named prefix + address.
type valkeySource struct {
	prefix string
	src    valkeyHealth
}

// perSecondNode prefixes the address of a per-second store's node in the
// node label of sluice_valkey_*, so that it is told apart from the
// store's (they may even be the same server).
const perSecondNode = "persecond/"

// valkeySources returns the Valkey stores among store and perSecond (nil
// when there is none), with the prefixes of their nodes' names.
func valkeySources(store, perSecond any) []valkeySource {
	var srcs []valkeySource
	if vh, ok := store.(valkeyHealth); ok {
		srcs = append(srcs, valkeySource{"", vh})
	}
	if vh, ok := perSecond.(valkeyHealth); ok {
		srcs = append(srcs, valkeySource{perSecondNode, vh})
	}
	return srcs
}

func newValkeyCollector(srcs []valkeySource) *valkeyCollector {
	return &valkeyCollector{
		srcs: srcs,
		breaker: prometheus.NewDesc("sluice_valkey_breaker_state",
			"State of the circuit breaker of each Valkey node (a standalone server, or a cluster primary and its slots): 1 for the current state (closed, open, half-open).",
			[]string{"node", "state"}, nil),
		risk: prometheus.NewDesc("sluice_valkey_config_risk",
			"1 for each Valkey setting found at connection that loses counts (an evicting maxmemory-policy) or refuses decisions (cluster-require-full-coverage yes).",
			[]string{"node", "setting", "value"}, nil),
		checked: prometheus.NewDesc("sluice_valkey_config_checked",
			"1 when the settings of every Valkey node could be read at connection; 0 when CONFIG is disabled somewhere or not connected yet.",
			nil, nil),
	}
}

func (c *valkeyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.breaker
	ch <- c.risk
	ch <- c.checked
}

func (c *valkeyCollector) Collect(ch chan<- prometheus.Metric) {
	states := []valkeystore.BreakerState{valkeystore.BreakerClosed, valkeystore.BreakerOpen, valkeystore.BreakerHalfOpen}
	all := true
	for _, src := range c.srcs {
		for node, st := range src.src.Breakers() {
			for _, s := range states {
				v := 0.0
				if s == st {
					v = 1
				}
				ch <- prometheus.MustNewConstMetric(c.breaker, prometheus.GaugeValue, v, src.prefix+node, s.String())
			}
		}
		risks, checked := src.src.Risks()
		for _, r := range risks {
			ch <- prometheus.MustNewConstMetric(c.risk, prometheus.GaugeValue, 1, src.prefix+r.Node, r.Setting, r.Value)
		}
		all = all && checked
	}
	v := 0.0
	if all {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(c.checked, prometheus.GaugeValue, v)
}
