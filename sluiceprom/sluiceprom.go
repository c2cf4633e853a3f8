// Package sluiceprom exports the decisions of sluice limiters as Prometheus
// metrics. A *Metrics is a sluice.Observer: make one per registry and give
// it to every limiter.
//
//	m, err := sluiceprom.New(prometheus.DefaultRegisterer)
//	if err != nil { ... }
//	api, err := sluice.New(store, policy, sluice.WithName("api"), sluice.WithObserver(m))
//
// The metrics, all labelled by the limiter's name (sluice.WithName):
//
//	sluice_decisions_total{limiter, outcome}           counter
//	sluice_store_errors_total{limiter, reason}          counter
//	sluice_decision_duration_seconds{limiter}           histogram
//	sluice_warnings_total{limiter}                      counter
//	sluice_lease_events_total{limiter, event}           counter
//	sluice_blocks_total{limiter}                        counter
//	sluice_blocked_total{limiter}                       counter
//	sluice_grant_*{limiter, ...}                        (Grants, grants.go)
//
// outcome is one of:
//
//	allowed                 the store allowed the request
//	denied                  the store refused it
//	shadow_denied           the store refused it, but the limiter is in shadow
//	                        mode (sluice.WithShadow), so it was allowed: what a
//	                        dark-launched limit would have refused
//	degraded_allowed        the store could not decide (Result.Degraded) and the
//	                        fail mode allowed: FailOpen
//	degraded_denied         the store could not decide and the fail mode
//	                        refused: FailClosed
//	degraded_shadow_denied  the store could not decide, the fail mode would have
//	                        refused, and shadow mode allowed
//
// So sum by (limiter) of decisions_total is every decision, and
// outcome=~"degraded_.*" is every decision made without the store.
//
// store_errors_total counts the store errors behind degraded decisions, one
// per decision, by reason: "unavailable" (an error wrapping
// sluice.ErrStoreUnavailable, such as valkeystore.ErrCircuitOpen: the store
// refused without trying, even when the failure that opened the breaker
// was a timeout), "timeout" (the decision timeout or the caller's deadline
// passed first) and "error" (any other: connection refused, a
// server error such as OOM). The errors themselves go to the limiter's
// rate-limited log.
//
// decision_duration_seconds is the time a limiter spent deciding, store
// round trip included. Its default buckets (DefaultBuckets) run from 50µs to
// 250ms: a healthy Valkey decides in well under a millisecond, and a
// timed-out decision takes the limiter's timeout (50ms by default).
//
// warnings_total counts the allowed decisions that crossed the limiter's
// warning threshold (sluice.WithWarning, Result.Warning): keys close to
// their first refusal.
//
// blocks_total counts the blocks started by the limiter's penalty
// (sluice.WithPenalty, Result.BlockStarted), and blocked_total the
// refusals of blocked keys (Result.Blocked, the refusal that started the
// block included, from the store or the deny cache); both are among the
// denied (or shadow_denied) decisions of decisions_total.
//
// The grants of limiters with grants (sluice.WithGrants) are read from
// their Limiter.GrantStats at each scrape: give the limiters to Grants.
//
//	m.Grants(api)
//
// The limiter label takes the limiters' names, so their number bounds the
// series: 6 outcomes + 3 reasons + the warning and the two penalty
// counters + one histogram per limiter, and 11 grant series for one given
// to Grants. Keys, which are unbounded, are
// never labels.
package sluiceprom

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice"
)

// DefaultBuckets are the decision latency histogram's buckets, in seconds:
// 50µs to 250ms.
var DefaultBuckets = []float64{
	0.00005, 0.0001, 0.00025, 0.0005,
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
}

// The outcome label's values.
const (
	OutcomeAllowed              = "allowed"
	OutcomeDenied               = "denied"
	OutcomeShadowDenied         = "shadow_denied"
	OutcomeDegradedAllowed      = "degraded_allowed"
	OutcomeDegradedDenied       = "degraded_denied"
	OutcomeDegradedShadowDenied = "degraded_shadow_denied"
)

// The reason label's values.
const (
	ReasonTimeout     = "timeout"
	ReasonUnavailable = "unavailable"
	ReasonError       = "error"
)

var (
	outcomes = [...]string{OutcomeAllowed, OutcomeDenied, OutcomeShadowDenied, OutcomeDegradedAllowed, OutcomeDegradedDenied, OutcomeDegradedShadowDenied}
	reasons  = [...]string{ReasonTimeout, ReasonUnavailable, ReasonError}
)

// An Option configures New.
type Option interface{ apply(*config) }

// optionFunc is an Option made of a function, as the root package's.
type optionFunc func(*config)

func (f optionFunc) apply(x *config) { f(x) }

type config struct {
	namespace string
	buckets   []float64
	labels    prometheus.Labels
}

// WithNamespace sets the metric names' prefix (default "sluice"). An empty
// namespace drops the prefix: decisions_total.
func WithNamespace(ns string) Option {
	return optionFunc(func(c *config) { c.namespace = ns })
}

// WithBuckets sets the latency histogram's buckets, in seconds (default
// DefaultBuckets).
func WithBuckets(b []float64) Option {
	return optionFunc(func(c *config) { c.buckets = append([]float64(nil), b...) })
}

// WithConstLabels adds labels with fixed values to every metric, such as
// the name of the service.
func WithConstLabels(l prometheus.Labels) Option {
	return optionFunc(func(c *config) { c.labels = l })
}

// Metrics counts the decisions of any number of limiters. It implements
// sluice.Observer (give it to sluice.WithObserver) and prometheus.Collector.
// It is safe for concurrent use; ObserveDecision does not allocate once a
// limiter has been seen.
type Metrics struct {
	decisions *prometheus.CounterVec
	errors    *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	leases    *prometheus.CounterVec
	warnings  *prometheus.CounterVec
	blocks    *prometheus.CounterVec
	blocked   *prometheus.CounterVec

	grantDescs *grantDescs // the grants' metrics (grants.go)

	limiters sync.Map // limiter name -> *series
}

// series are the metrics of one limiter, looked up once.
type series struct {
	outcomes [len(outcomes)]prometheus.Counter
	reasons  [len(reasons)]prometheus.Counter
	latency  prometheus.Observer
	warnings prometheus.Counter
	blocks   prometheus.Counter
	blocked  prometheus.Counter
}

var _ sluice.Observer = (*Metrics)(nil)
var _ sluice.LeaseObserver = (*Metrics)(nil)
var _ prometheus.Collector = (*Metrics)(nil)

// New returns Metrics registered with reg. With a nil reg it registers
// nothing: register the Metrics yourself (it is a prometheus.Collector). It
// fails when reg already holds metrics of the same names, such as another
// Metrics: make one per registry and share it among limiters.
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	c := config{namespace: "sluice", buckets: DefaultBuckets}
	for _, o := range opts {
		o.apply(&c)
	}
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace:   c.namespace,
			Name:        "decisions_total",
			Help:        "Decisions by limiter and outcome: allowed, denied, shadow_denied, degraded_allowed, degraded_denied, degraded_shadow_denied.",
			ConstLabels: c.labels,
		}, []string{"limiter", "outcome"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace:   c.namespace,
			Name:        "store_errors_total",
			Help:        "Store errors behind degraded decisions, by limiter and reason: timeout, unavailable (circuit open), error.",
			ConstLabels: c.labels,
		}, []string{"limiter", "reason"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace:   c.namespace,
			Name:        "decision_duration_seconds",
			Help:        "Time a limiter spent deciding, store round trip included.",
			Buckets:     c.buckets,
			ConstLabels: c.labels,
		}, []string{"limiter"}),
		leases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace:   c.namespace,
			Name:        "lease_events_total",
			Help:        "What became of in-flight limits' leases, by limiter and event: released, ended (a release found it already ended: expired or reset), renewed, lost (a renewal found it ended), expired (reaped by the store because its lease passed; counted when its key is next used). Acquires and refusals are in decisions_total.",
			ConstLabels: c.labels,
		}, []string{"limiter", "event"}),
		warnings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace:   c.namespace,
			Name:        "warnings_total",
			Help:        "Allowed decisions that crossed the limiter's warning threshold (sluice.WithWarning), by limiter.",
			ConstLabels: c.labels,
		}, []string{"limiter"}),
		blocks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace:   c.namespace,
			Name:        "blocks_total",
			Help:        "Blocks started by the limiter's penalty (sluice.WithPenalty), by limiter.",
			ConstLabels: c.labels,
		}, []string{"limiter"}),
		blocked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace:   c.namespace,
			Name:        "blocked_total",
			Help:        "Refusals of keys blocked by the limiter's penalty, the refusal that started the block included, by limiter (among the denied decisions).",
			ConstLabels: c.labels,
		}, []string{"limiter"}),
		grantDescs: newGrantDescs(c),
	}
	if reg != nil {
		if err := reg.Register(m); err != nil {
			return nil, fmt.Errorf("sluiceprom: %w", err)
		}
	}
	return m, nil
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.decisions.Describe(ch)
	m.errors.Describe(ch)
	m.latency.Describe(ch)
	m.leases.Describe(ch)
	m.warnings.Describe(ch)
	m.blocks.Describe(ch)
	m.blocked.Describe(ch)
	m.grantDescs.describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.decisions.Collect(ch)
	m.errors.Collect(ch)
	m.latency.Collect(ch)
	m.leases.Collect(ch)
	m.warnings.Collect(ch)
	m.blocks.Collect(ch)
	m.blocked.Collect(ch)
	m.grantDescs.collect(ch)
}

// ObserveDecision implements sluice.Observer.
func (m *Metrics) ObserveDecision(limiter string, res sluice.Result, err error, latency time.Duration) {
	s := m.series(limiter)
	s.outcomes[outcome(res)].Inc()
	if res.Degraded || err != nil {
		s.reasons[reason(err)].Inc()
	}
	if res.Warning {
		s.warnings.Inc()
	}
	if res.Blocked {
		s.blocked.Inc()
		if res.BlockStarted {
			s.blocks.Inc()
		}
	}
	s.latency.Observe(latency.Seconds())
}

// ObserveLease implements sluice.LeaseObserver.
func (m *Metrics) ObserveLease(limiter string, ev sluice.LeaseEvent) {
	m.leases.WithLabelValues(limiter, ev.String()).Inc()
}

// Limiter creates the series of limiter at zero, so that dashboards and
// alerts see them before the first decision (rate() of a series that
// appears at 1 misses that first event). It is optional.
func (m *Metrics) Limiter(limiter string) { m.series(limiter) }

func (m *Metrics) series(limiter string) *series {
	if s, ok := m.limiters.Load(limiter); ok {
		return s.(*series)
	}
	s := &series{latency: m.latency.WithLabelValues(limiter), warnings: m.warnings.WithLabelValues(limiter),
		blocks: m.blocks.WithLabelValues(limiter), blocked: m.blocked.WithLabelValues(limiter)}
	for i, o := range outcomes {
		s.outcomes[i] = m.decisions.WithLabelValues(limiter, o)
	}
	for i, r := range reasons {
		s.reasons[i] = m.errors.WithLabelValues(limiter, r)
	}
	actual, _ := m.limiters.LoadOrStore(limiter, s)
	return actual.(*series)
}

// outcome returns the index in outcomes of res's outcome.
func outcome(res sluice.Result) int {
	return outcomeIndex[bit(res.Degraded)][bit(res.Shadowed)][bit(res.Allowed)]
}

// outcomeIndex is the index in outcomes by degraded, shadowed and allowed:
// a shadow decision counts as a shadow denial whether it allowed or not.
var outcomeIndex = [2][2][2]int{
	{ // decided by the store
		{1, 0}, // denied, allowed
		{2, 2}, // shadow denied
	},
	{ // degraded: decided by the fail mode
		{4, 3}, // denied, allowed
		{5, 5}, // shadow denied
	},
}

// bit is 1 for true, 0 for false.
func bit(b bool) int {
	if b {
		return 1
	}
	return 0
}

// reason returns the index in reasons of err's reason.
func reason(err error) int {
	switch {
	case errors.Is(err, sluice.ErrStoreUnavailable):
		return 1 // first: an open breaker's error also wraps the timeout that opened it
	case errors.Is(err, context.DeadlineExceeded):
		return 0
	default:
		return 2
	}
}
