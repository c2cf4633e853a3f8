package envoy

import (
	"math"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
)

// The metrics envoyproxy/ratelimit users chart, under the names its
// Prometheus mapping gives them: ratelimit_service_rate_limit_* per domain
// and descriptor keys (key1, key2: the first two levels of the matched
// descriptor, "key" or "key_value" as configured), the call errors, the
// configuration loads and the gRPC latency.

// DefaultNearLimitRatio is the share of a limit past which hits count as
// near_limit (NEAR_LIMIT_RATIO).
const DefaultNearLimitRatio = 0.8

// DefaultMaxMetricSeries bounds the label sets made from request values
// (detailed_metric, value_to_metric, overrides); past it their hits are
// counted under key1="_other".
const DefaultMaxMetricSeries = 1000

// statKey labels one descriptor's metrics. dynamic: built from request
// values, so subject to the cardinality cap.
type statKey struct {
	domain, key1, key2 string
	dynamic            bool
}

type envoyStats struct {
	totalHits, overLimit, nearLimit, withinLimit, shadowMode *prometheus.CounterVec
	callErrors                                               *prometheus.CounterVec
	loadSuccess, loadError, globalShadow                     prometheus.Counter
	responseTime                                             *prometheus.HistogramVec
	totalRequests                                            *prometheus.CounterVec
	shouldRequests                                           prometheus.Counter
	// grpcRequests is sluice_server_grpc_requests_total, by overall code;
	// callsOK its OK series, looked up once.
	grpcRequests *prometheus.CounterVec
	callsOK      prometheus.Counter
	shouldTime   prometheus.Observer

	nearRatio float64
	maxSeries int
	mu        sync.Mutex
	series    map[statKey]bool
	// counters caches each label set's counters: a look-up in a sync.Map
	// instead of hashing the labels into five vectors on every hit.
	counters sync.Map // statKey -> *statCounters
	// reg and localOver: the over_limit_with_local_cache counters
	// (LOCAL_CACHE_SIZE_IN_BYTES), one metric per descriptor as upstream's
	// mapping leaves them, registered on first use.
	reg       prometheus.Registerer
	localOver sync.Map // statKey -> prometheus.Counter
}

// statCounters are one label set's counters.
type statCounters struct {
	total, over, near, within, shadow prometheus.Counter
}

func (e *envoyStats) countersFor(k statKey) *statCounters {
	if c, ok := e.counters.Load(k); ok {
		return c.(*statCounters)
	}
	l := []string{k.domain, k.key1, k.key2}
	c := &statCounters{
		total: e.totalHits.WithLabelValues(l...), over: e.overLimit.WithLabelValues(l...),
		near: e.nearLimit.WithLabelValues(l...), within: e.withinLimit.WithLabelValues(l...),
		shadow: e.shadowMode.WithLabelValues(l...),
	}
	actual, _ := e.counters.LoadOrStore(k, c)
	return actual.(*statCounters)
}

func newEnvoyStats(reg prometheus.Registerer, nearRatio float64, maxSeries int) *envoyStats {
	if nearRatio <= 0 || nearRatio > 1 {
		nearRatio = DefaultNearLimitRatio
	}
	if maxSeries <= 0 {
		maxSeries = DefaultMaxMetricSeries
	}
	labels := []string{"domain", "key1", "key2"}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_rate_limit_" + name, Help: help}, labels)
	}
	e := &envoyStats{
		totalHits:   counter("total_hits", "Hits of Envoy descriptors that matched a limit, by domain and descriptor keys."),
		overLimit:   counter("over_limit", "Hits over the limit (shadow-mode ones included)."),
		nearLimit:   counter("near_limit", "Hits within the limit but past NEAR_LIMIT_RATIO of it."),
		withinLimit: counter("within_limit", "Hits within the limit."),
		shadowMode:  counter("shadow_mode", "Hits over the limit that shadow mode allowed."),
		callErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_service_should_rate_limit_error",
			Help: "ShouldRateLimit calls answered with an error, by type (redis_error: the store; service_error: the request).",
		}, []string{"err_type"}),
		loadSuccess: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_service_config_load_success", Help: "Configurations loaded and applied."}),
		loadError: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_service_config_load_error", Help: "Configurations rejected (the last good one keeps serving)."}),
		globalShadow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_service_global_shadow_mode", Help: "Calls over the limit answered OK by the global shadow mode (SHADOW_MODE)."}),
		responseTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratelimit_service_response_time_seconds",
			Help:    "Time to answer gRPC calls, by method.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"grpc_method"}),
		totalRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_service_total_requests", Help: "gRPC calls, by method."}, []string{"grpc_method"}),
		grpcRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_server_grpc_requests_total",
			Help: "Envoy ShouldRateLimit calls, by overall code (OK, OVER_LIMIT) or gRPC error code.",
		}, []string{"code"}),
		nearRatio: nearRatio,
		maxSeries: maxSeries,
		series:    map[statKey]bool{},
		reg:       reg,
	}
	reg.MustRegister(e.totalHits, e.overLimit, e.nearLimit, e.withinLimit, e.shadowMode, e.callErrors,
		e.loadSuccess, e.loadError, e.globalShadow, e.responseTime, e.totalRequests, e.grpcRequests)
	e.callsOK = e.grpcRequests.WithLabelValues("OK")
	e.shouldRequests = e.totalRequests.WithLabelValues("ShouldRateLimit")
	e.shouldTime = e.responseTime.WithLabelValues("ShouldRateLimit")
	e.callErrors.WithLabelValues("redis_error")
	e.callErrors.WithLabelValues("service_error")
	return e
}

// configKey labels a matched descriptor: its configured keys, or the
// request's values where detailed_metric (on the last node) or
// value_to_metric (on a level) asks.
func (e *envoyStats) configKey(domain string, path []*config.Descriptor, entries []config.Entry) statKey {
	k := statKey{domain: domain}
	detailed := path[len(path)-1].DetailedMetric
	for i := 0; i < len(path) && i < 2; i++ {
		seg := path[i].StatName()
		if detailed || path[i].ValueToMetric {
			seg = entries[i].Key + "_" + entries[i].Value
			if path[i].ShareThreshold && path[i].Value != "" {
				seg = path[i].StatName()
			}
			k.dynamic = true
		}
		if i == 0 {
			k.key1 = seg
		} else {
			k.key2 = seg
		}
	}
	return k
}

// overrideKey labels a descriptor with a per-request limit: its own keys
// and values, as envoyproxy/ratelimit names them.
func (e *envoyStats) overrideKey(domain string, entries []config.Entry) statKey {
	k := statKey{domain: domain, dynamic: true}
	for i := 0; i < len(entries) && i < 2; i++ {
		seg := entries[i].Key
		if entries[i].Value != "" {
			seg += "_" + entries[i].Value
		}
		if i == 0 {
			k.key1 = seg
		} else {
			k.key2 = seg
		}
	}
	return k
}

// admit returns k, or the overflow series once the cap on series made from
// request values is reached.
func (e *envoyStats) admit(k statKey) statKey {
	if !k.dynamic {
		return k
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.series[k] {
		return k
	}
	if len(e.series) < e.maxSeries {
		e.series[k] = true
		return k
	}
	return statKey{domain: k.domain, key1: "_other"}
}

// record counts one descriptor's hits: over (and shadow) when refused, else
// within, and near past the near-limit ratio. remaining is what is left
// after the hits.
func (e *envoyStats) record(k statKey, hits uint64, limit, remaining int64, over, shadow bool) {
	if k.domain == "" || hits == 0 && !over {
		return
	}
	c := e.countersFor(e.admit(k))
	h := float64(hits)
	c.total.Add(h)
	if over {
		c.over.Add(h)
		if shadow {
			c.shadow.Add(h)
		}
		return
	}
	c.within.Add(h)
	near := math.Floor(float64(limit) * e.nearRatio)
	after := float64(limit - remaining)
	if after > near {
		c.near.Add(min(h, after-near))
	}
}

// recordLocalOver counts hits refused by the local cache: the descriptor's
// over_limit_with_local_cache, named as upstream's statsd name
// ratelimit.service.rate_limit.<domain>.<key1>[.<key2>].over_limit_with_local_cache
// becomes in Prometheus unmapped (every character but letters, digits and
// _ made _).
func (e *envoyStats) recordLocalOver(k statKey, hits uint64) {
	if k.domain == "" || hits == 0 {
		return
	}
	k = e.admit(k)
	if c, ok := e.localOver.Load(k); ok {
		c.(prometheus.Counter).Add(float64(hits))
		return
	}
	name := "ratelimit.service.rate_limit." + k.domain + "." + k.key1
	if k.key2 != "" {
		name += "." + k.key2
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: escapeMetricName(name + ".over_limit_with_local_cache"),
		Help: "Hits of this descriptor refused by the local cache (LOCAL_CACHE_SIZE_IN_BYTES), without asking the store."})
	if err := e.reg.Register(c); err != nil {
		if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
			c = are.ExistingCollector.(prometheus.Counter)
		} else {
			return // two descriptors whose names escape alike: the first keeps the name
		}
	}
	actual, _ := e.localOver.LoadOrStore(k, c)
	actual.(prometheus.Counter).Add(float64(hits))
}

// escapeMetricName is the statsd exporter's escaping of a name it does not
// map: every character but ASCII letters, digits and _ becomes _, and a
// leading digit gets a _ before it.
func escapeMetricName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) > 0 && b[0] >= '0' && b[0] <= '9' {
		return "_" + string(b)
	}
	return string(b)
}

// observe counts a gRPC call of fullMethod started at start, and its
// latency, by method.
func (e *envoyStats) observe(fullMethod string, start time.Time) {
	method := fullMethod[strings.LastIndexByte(fullMethod, '/')+1:]
	if method == "ShouldRateLimit" {
		e.shouldRequests.Inc()
		e.shouldTime.Observe(time.Since(start).Seconds())
	} else {
		e.totalRequests.WithLabelValues(method).Inc()
		e.responseTime.WithLabelValues(method).Observe(time.Since(start).Seconds())
	}
}
