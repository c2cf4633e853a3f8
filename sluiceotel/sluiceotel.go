// Package sluiceotel exports the decisions of sluice limiters to
// OpenTelemetry: the metrics package sluiceprom exports to Prometheus, in
// OTel form, and a span per decision. An *Observer is a
// sluice.ContextObserver: make one and give it to every limiter.
//
//	o, err := sluiceotel.New(sluiceotel.WithTracerProvider(tp), sluiceotel.WithMeterProvider(mp))
//	if err != nil { ... }
//	api, err := sluice.New(store, policy, sluice.WithName("api"), sluice.WithObserver(o))
//
// Without WithTracerProvider and WithMeterProvider it uses the global
// providers (otel.GetTracerProvider, otel.GetMeterProvider), which export
// nothing until the program sets them.
//
// The metrics (OpenTelemetry names; docs/observability.md gives the table):
//
//	sluice.decisions         counter    {decision}  rate_limit.policy, rate_limit.outcome
//	sluice.store.errors      counter    {error}     rate_limit.policy, error.type
//	sluice.decision.duration histogram  s           rate_limit.policy
//	sluice.breaker.state     gauge      1           rate_limit.store.node, rate_limit.breaker.state (ObserveBreakers)
//	sluice.grant.*, sluice.grants                    rate_limit.policy, ... (ObserveGrants, grants.go)
//
// rate_limit.outcome takes sluiceprom's outcomes (allowed, denied,
// shadow_denied, degraded_allowed, degraded_denied, degraded_shadow_denied)
// and error.type its reasons (timeout, unavailable, error).
//
// Each decision made in a trace is a span named "rate_limit <limiter>", a
// child of the recording span in the caller's context (the context given
// to Allow, AllowN, AllowAll, ...), from when the decision was sent to the
// store to its answer, with the attributes the Attr constants name. A
// decision outside any trace (no recording span in its context) starts
// none. A span per store
// batch would cost less, but valkeystore's batches merge the decisions of
// many callers and carry none of their contexts; a decision's span costs
// what a sampler lets it (an unsampled one sets no attribute).
//
// Keys never appear in clear: neither the metrics nor the spans carry
// them. WithKeyHash adds rate_limit.key_hash to the spans, a keyed hash
// (HMAC-SHA256) that identifies a key's decisions without revealing it to
// whoever lacks the secret. WrapValkey instruments the Valkey client with
// valkeyotel, its command spans holding the commands with every key
// redacted (RedactStatement).
package sluiceotel

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the tracer and meter.
const ScopeName = "github.com/sluicehq/sluice/sluiceotel"

// The attributes of the spans and metrics.
const (
	// AttrPolicy is the limiter's name (sluice.WithName; in sluice serve,
	// the policy's limiter).
	AttrPolicy = attribute.Key("rate_limit.policy")
	// AttrAlgorithm is the algorithm of the rule that decided, such as
	// "gcra" (sluice.Algorithm.String).
	AttrAlgorithm = attribute.Key("rate_limit.algorithm")
	// AttrDecision is what the caller was told: "allowed" or "denied".
	AttrDecision = attribute.Key("rate_limit.decision")
	// AttrOutcome is sluiceprom's outcome (OutcomeAllowed, ...).
	AttrOutcome = attribute.Key("rate_limit.outcome")
	// AttrAnsweredBy is what answered: "store", "deny_cache" or
	// "fail_mode" (sluice.Answer.String).
	AttrAnsweredBy = attribute.Key("rate_limit.answered_by")
	// AttrLimitSource is the limit that decided: "policy", "plan" or
	// "override" (sluice.LimitSource.String).
	AttrLimitSource = attribute.Key("rate_limit.limit_source")
	// AttrCost is the cost asked for (0: a peek).
	AttrCost = attribute.Key("rate_limit.cost")
	// AttrLimit is the limit in force (Result.Limit).
	AttrLimit = attribute.Key("rate_limit.limit")
	// AttrRemaining is Result.Remaining.
	AttrRemaining = attribute.Key("rate_limit.remaining")
	// AttrRetryAfter is Result.RetryAfter in seconds (0 when allowed).
	AttrRetryAfter = attribute.Key("rate_limit.retry_after")
	// AttrShadow is true when shadow mode allowed what the limit refused.
	AttrShadow = attribute.Key("rate_limit.shadow")
	// AttrKeyHash is the keyed hash of the key (WithKeyHash only).
	AttrKeyHash = attribute.Key("rate_limit.key_hash")
	// AttrErrorType is the class of the store error behind a degraded
	// decision (ReasonTimeout, ...), OpenTelemetry's error.type.
	AttrErrorType = attribute.Key("error.type")
	// AttrNode and AttrBreakerState label sluice.breaker.state: the
	// Valkey node (host:port) and a state (closed, open, half-open).
	AttrNode         = attribute.Key("rate_limit.store.node")
	AttrBreakerState = attribute.Key("rate_limit.breaker.state")
)

// The values of AttrOutcome, as sluiceprom's outcome label.
const (
	OutcomeAllowed              = "allowed"
	OutcomeDenied               = "denied"
	OutcomeShadowDenied         = "shadow_denied"
	OutcomeDegradedAllowed      = "degraded_allowed"
	OutcomeDegradedDenied       = "degraded_denied"
	OutcomeDegradedShadowDenied = "degraded_shadow_denied"
)

// The values of AttrErrorType, as sluiceprom's reason label.
const (
	ReasonTimeout     = "timeout"
	ReasonUnavailable = "unavailable"
	ReasonError       = "error"
)

var (
	outcomes = [...]string{OutcomeAllowed, OutcomeDenied, OutcomeShadowDenied, OutcomeDegradedAllowed, OutcomeDegradedDenied, OutcomeDegradedShadowDenied}
	reasons  = [...]string{ReasonTimeout, ReasonUnavailable, ReasonError}
)

// DefaultBuckets are the decision latency histogram's bucket boundaries,
// in seconds: sluiceprom's, 50µs to 250ms.
var DefaultBuckets = []float64{
	0.00005, 0.0001, 0.00025, 0.0005,
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
}

// An Option configures New.
type Option interface{ apply(*config) }

// optionFunc is an Option made of a function, as the root package's.
type optionFunc func(*config)

func (f optionFunc) apply(x *config) { f(x) }

type config struct {
	tp      trace.TracerProvider
	mp      metric.MeterProvider
	buckets []float64
	secret  []byte
}

// WithTracerProvider sets where the spans go (default
// otel.GetTracerProvider()). A trace/noop provider turns them off.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tp = tp })
}

// WithMeterProvider sets where the metrics go (default
// otel.GetMeterProvider()).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.mp = mp })
}

// WithBuckets sets the latency histogram's bucket boundaries, in seconds
// (default DefaultBuckets).
func WithBuckets(b []float64) Option {
	return optionFunc(func(c *config) { c.buckets = append([]float64(nil), b...) })
}

// MinKeyHashSecret is the shortest secret WithKeyHash accepts, in bytes.
const MinKeyHashSecret = 16

// WithKeyHash adds rate_limit.key_hash to every decision's span: the first
// 16 bytes, in hex, of HMAC-SHA256 keyed by secret of the decision's store
// key (driver.Key). The same key gives the same hash for as long as
// the secret is kept, so a key's decisions can be found without the key
// appearing; without the secret, the hash reveals nothing of the key, even
// of keys as guessable as IP addresses. New refuses a secret shorter than
// MinKeyHashSecret. Without WithKeyHash the spans carry nothing of the key.
func WithKeyHash(secret []byte) Option {
	return optionFunc(func(c *config) { c.secret = append([]byte{}, secret...) })
}

// Observer records the decisions of any number of limiters. It implements
// sluice.ContextObserver (give it to sluice.WithObserver). It is safe for
// concurrent use.
type Observer struct {
	tp        trace.TracerProvider
	mp        metric.MeterProvider
	tracer    trace.Tracer
	meter     metric.Meter
	decisions metric.Int64Counter
	errors    metric.Int64Counter
	latency   metric.Float64Histogram
	secret    []byte
	hashes    sync.Pool // of hash.Hash, keyed by secret

	limiters sync.Map // limiter name -> *series
}

// series are the metric options and names of one limiter, made once.
type series struct {
	spanName string
	policy   attribute.KeyValue
	// Slices made once: passing a fresh one to an instrument's variadic
	// method would allocate at each decision.
	outcomes [len(outcomes)][]metric.AddOption
	reasons  [len(reasons)][]metric.AddOption
	latency  []metric.RecordOption
}

var _ sluice.ContextObserver = (*Observer)(nil)

// New returns an Observer recording to the providers of opts. It fails when
// an option cannot be honoured or an instrument cannot be made.
func New(opts ...Option) (*Observer, error) {
	c := config{buckets: DefaultBuckets}
	for _, o := range opts {
		o.apply(&c)
	}
	if c.secret != nil && len(c.secret) < MinKeyHashSecret {
		return nil, fmt.Errorf("sluiceotel: WithKeyHash: the secret has %d bytes, want at least %d", len(c.secret), MinKeyHashSecret)
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	o := &Observer{tp: c.tp, mp: c.mp, secret: c.secret}
	o.tracer = c.tp.Tracer(ScopeName)
	o.meter = c.mp.Meter(ScopeName)
	o.hashes.New = func() any { return hmac.New(sha256.New, o.secret) }
	var err error
	o.decisions, err = o.meter.Int64Counter("sluice.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Decisions by limiter and outcome: allowed, denied, shadow_denied, degraded_allowed, degraded_denied, degraded_shadow_denied."))
	if err != nil {
		return nil, fmt.Errorf("sluiceotel: %w", err)
	}
	o.errors, err = o.meter.Int64Counter("sluice.store.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Store errors behind degraded decisions, by limiter and error.type: timeout, unavailable (circuit open), error."))
	if err != nil {
		return nil, fmt.Errorf("sluiceotel: %w", err)
	}
	o.latency, err = o.meter.Float64Histogram("sluice.decision.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a limiter spent deciding, store round trip included."),
		metric.WithExplicitBucketBoundaries(c.buckets...))
	if err != nil {
		return nil, fmt.Errorf("sluiceotel: %w", err)
	}
	return o, nil
}

// TracerProvider and MeterProvider return the providers o records to.
func (o *Observer) TracerProvider() trace.TracerProvider { return o.tp }

// MeterProvider returns the meter provider o records to.
func (o *Observer) MeterProvider() metric.MeterProvider { return o.mp }

// Limiter creates the series of limiter, so that its counters are exported
// at zero before its first decision. It is optional.
func (o *Observer) Limiter(limiter string) {
	s := o.series(limiter)
	ctx := context.Background()
	for i := range s.outcomes {
		o.decisions.Add(ctx, 0, s.outcomes[i]...)
	}
	for i := range s.reasons {
		o.errors.Add(ctx, 0, s.reasons[i]...)
	}
}

// ObserveDecision implements sluice.Observer: the metrics of a decision
// made without a context (limiters call ObserveContext instead).
func (o *Observer) ObserveDecision(limiter string, res sluice.Result, err error, latency time.Duration) {
	o.record(context.Background(), o.series(limiter), res, err, latency)
}

// ObserveContext implements sluice.ContextObserver: the metrics of the
// decision, and its span when the caller's context holds a recording span
// (a decision outside any trace starts none: a trace per decision would
// flood the tracing backend, and cost every decision a span).
func (o *Observer) ObserveContext(ctx context.Context, ob sluice.Observation) {
	s := o.series(ob.Limiter)
	o.record(ctx, s, ob.Result, ob.Err, ob.Latency)
	if !trace.SpanFromContext(ctx).IsRecording() {
		return
	}
	_, span := o.tracer.Start(ctx, s.spanName, trace.WithTimestamp(ob.Start), internalKind)
	if span.IsRecording() {
		o.describe(span, s, &ob)
	}
	span.End(trace.WithTimestamp(ob.Start.Add(ob.Latency)))
}

var internalKind = trace.WithSpanKind(trace.SpanKindInternal)

// describe sets the attributes of a decision's span.
func (o *Observer) describe(span trace.Span, s *series, ob *sluice.Observation) {
	res := &ob.Result
	decision := "allowed"
	if !res.Allowed {
		decision = "denied"
	}
	attrs := [...]attribute.KeyValue{
		s.policy,
		AttrAlgorithm.String(ob.Algorithm.String()),
		AttrDecision.String(decision),
		AttrOutcome.String(outcomes[outcome(*res)]),
		AttrAnsweredBy.String(ob.Answer.String()),
		AttrLimitSource.String(res.Source.String()),
		AttrCost.Int64(ob.Cost),
		AttrLimit.Int64(res.Limit),
		AttrRemaining.Int64(res.Remaining),
		AttrRetryAfter.Float64(res.RetryAfter.Seconds()),
		AttrShadow.Bool(res.Shadowed),
	}
	span.SetAttributes(attrs[:]...)
	if o.secret != nil {
		span.SetAttributes(AttrKeyHash.String(o.hash(ob.Key)))
	}
	if ob.Answer == sluice.AnswerFailMode {
		r := reasons[reason(ob.Err)]
		// The class of the error only: a store's message may quote a key.
		span.SetAttributes(AttrErrorType.String(r))
		span.SetStatus(codes.Error, "store "+r+": decided by the fail mode")
	}
}

// hash is the keyed hash of key (WithKeyHash).
func (o *Observer) hash(key string) string {
	h := o.hashes.Get().(hash.Hash)
	h.Reset()
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	out := h.Sum(sum[:0])
	o.hashes.Put(h)
	return hex.EncodeToString(out[:16])
}

// record records the metrics of a decision.
func (o *Observer) record(ctx context.Context, s *series, res sluice.Result, err error, latency time.Duration) {
	o.decisions.Add(ctx, 1, s.outcomes[outcome(res)]...)
	if res.Degraded || err != nil {
		o.errors.Add(ctx, 1, s.reasons[reason(err)]...)
	}
	o.latency.Record(ctx, latency.Seconds(), s.latency...)
}

func (o *Observer) series(limiter string) *series {
	if s, ok := o.limiters.Load(limiter); ok {
		return s.(*series)
	}
	policy := AttrPolicy.String(limiter)
	s := &series{spanName: "rate_limit " + limiter, policy: policy,
		latency: []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(policy))}}
	for i, out := range outcomes {
		s.outcomes[i] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(policy, AttrOutcome.String(out)))}
	}
	for i, r := range reasons {
		s.reasons[i] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(policy, AttrErrorType.String(r)))}
	}
	actual, _ := o.limiters.LoadOrStore(limiter, s)
	return actual.(*series)
}

// outcome returns the index in outcomes of res's outcome (as sluiceprom's).
func outcome(res sluice.Result) int {
	switch {
	case res.Degraded && res.Shadowed:
		return 5
	case res.Degraded && res.Allowed:
		return 3
	case res.Degraded:
		return 4
	case res.Shadowed:
		return 2
	case res.Allowed:
		return 0
	default:
		return 1
	}
}

// reason returns the index in reasons of err's reason (as sluiceprom's).
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
