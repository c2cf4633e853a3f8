package server

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/buildinfo"
)

type metrics struct {
	httpRequests *prometheus.CounterVec
	httpDuration *prometheus.HistogramVec
	// overrides and overrideEvictions: the override cache (overrides.go).
	overrides         prometheus.Gauge
	overrideEvictions prometheus.Counter
	reloads           *prometheus.CounterVec
	reloadOK          prometheus.Gauge
	loadedAt          prometheus.Gauge
	policies          prometheus.Gauge
	// timeouts is each limiter's decision timeout, so that alerts compare
	// its latency with its own budget.
	timeouts *prometheus.GaugeVec
}

func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// buildInfoGauge is sluice_build_info: always 1, with the build's version,
// revision and toolchain as labels (the same values sluice version prints).
func buildInfoGauge(bi buildinfo.Info) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_build_info",
		Help: "The running build: always 1; version is the module version, revision the commit it was built from (with modified=true for uncommitted changes).",
	}, []string{"version", "revision", "modified", "goversion"})
	g.WithLabelValues(bi.Version, bi.Revision, fmt.Sprint(bi.Modified), bi.GoVersion).Set(1)
	return g
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_server_http_requests_total",
			Help: "HTTP requests answered, by route and status code.",
		}, []string{"route", "code"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_server_http_request_duration_seconds",
			Help:    "Time to answer HTTP requests, by route.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"route"}),
		overrides: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_server_override_limiters", Help: "Limiters cached for per-request limit overrides."}),
		overrideEvictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_server_override_evictions_total", Help: "Override limiters evicted from the cache (least recently used first)."}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_server_config_reloads_total",
			Help: "Configuration reloads, by result (success, failure). A failed reload keeps the last good configuration.",
		}, []string{"result"}),
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_server_config_last_reload_successful",
			Help: "1 when the last reload attempt succeeded (or none was made), 0 when the file on disk was rejected.",
		}),
		loadedAt: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_server_config_loaded_timestamp_seconds",
			Help: "Unix time the configuration being served was applied.",
		}),
		timeouts: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_server_decision_timeout_seconds",
			Help: "Each limiter's decision timeout: past it, the policy's on_failure decides (deploy/prometheus's alert compares the decision p99 with it).",
		}, []string{"limiter"}),
		policies: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_server_policies",
			Help: "Policies in the configuration being served.",
		}),
	}
	reg.MustRegister(m.httpRequests, m.httpDuration, m.overrides, m.overrideEvictions,
		m.reloads, m.reloadOK, m.loadedAt, m.policies, m.timeouts, buildInfoGauge(buildinfo.Read()))
	m.reloadOK.Set(1)
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	return m
}

// observers passes each decision to several observers.
type observers []sluice.Observer

func (o observers) ObserveDecision(limiter string, res sluice.Result, err error, latency time.Duration) {
	for _, x := range o {
		x.ObserveDecision(limiter, res, err, latency)
	}
}

// ObserveLease passes a lease event to the observers that take them.
func (o observers) ObserveLease(limiter string, ev sluice.LeaseEvent) {
	for _, x := range o {
		if lo, ok := x.(sluice.LeaseObserver); ok {
			lo.ObserveLease(limiter, ev)
		}
	}
}
