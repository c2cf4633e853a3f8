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

// valkeyCollector exports, at each scrape:
//
//	sluice_valkey_breaker_state{node, state}            1 for the node's breaker's state, 0 for the others
//	sluice_valkey_config_risk{node, setting, value}     1 per server setting that loses counts or refuses decisions
//	sluice_valkey_config_checked                        1 when every node's settings could be read (CONFIG allowed)
type valkeyCollector struct {
	src     valkeyHealth
	breaker *prometheus.Desc
	risk    *prometheus.Desc
	checked *prometheus.Desc
}

func newValkeyCollector(src valkeyHealth) *valkeyCollector {
	return &valkeyCollector{
		src: src,
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
	for node, st := range c.src.Breakers() {
		for _, s := range states {
			v := 0.0
			if s == st {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.breaker, prometheus.GaugeValue, v, node, s.String())
		}
	}
	risks, checked := c.src.Risks()
	for _, r := range risks {
		ch <- prometheus.MustNewConstMetric(c.risk, prometheus.GaugeValue, 1, r.Node, r.Setting, r.Value)
	}
	v := 0.0
	if checked {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(c.checked, prometheus.GaugeValue, v)
}
