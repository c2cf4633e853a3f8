package sluiceotel_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluiceotel"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestMain(m *testing.M) { valkeytest.Main(m) }

var discard = slog.New(slog.DiscardHandler)

// telemetry is an Observer recording to an in-memory span recorder and a
// manual metric reader.
type telemetry struct {
	obs    *sluiceotel.Observer
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	tp     *sdktrace.TracerProvider
}

func newTelemetry(t testing.TB, opts ...sluiceotel.Option) *telemetry {
	t.Helper()
	tel := &telemetry{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tel.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	o, err := sluiceotel.New(append([]sluiceotel.Option{sluiceotel.WithTracerProvider(tel.tp), sluiceotel.WithMeterProvider(mp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	tel.obs = o
	return tel
}

// points returns every data point collected, as "name{k=v,...}" -> value
// (a histogram's count).
func (tel *telemetry) points(t testing.TB) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	id := func(name string, set attribute.Set) string {
		var kv []string
		for _, a := range set.ToSlice() {
			kv = append(kv, string(a.Key)+"="+a.Value.Emit())
		}
		return name + "{" + strings.Join(kv, ",") + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[id(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[id(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[id(m.Name, p.Attributes)] = float64(p.Count)
				}
			}
		}
	}
	return out
}

// brokenStore fails every decision.
type brokenStore struct{}

func (brokenStore) Do(_ context.Context, batch []driver.Op) error {
	for i := range batch {
		batch[i].Err = errors.New("connection refused")
	}
	return nil
}
func (brokenStore) Delete(context.Context, ...string) error { return nil }

// attrs returns a span's attributes by key.
func attrs(s sdktrace.ReadOnlySpan) map[string]string {
	out := map[string]string{}
	for _, a := range s.Attributes() {
		out[string(a.Key)] = a.Value.Emit()
	}
	return out
}

// mentions reports whether any span's name, attributes, events or status
// holds secret.
func mentions(spans []sdktrace.ReadOnlySpan, secret string) string {
	for _, s := range spans {
		var all []string
		all = append(all, s.Name(), s.Status().Description)
		for _, a := range s.Attributes() {
			all = append(all, a.Value.Emit())
		}
		for _, e := range s.Events() {
			all = append(all, e.Name)
			for _, a := range e.Attributes {
				all = append(all, a.Value.Emit())
			}
		}
		for _, x := range all {
			if strings.Contains(x, secret) {
				return fmt.Sprintf("span %q: %q", s.Name(), x)
			}
		}
	}
	return ""
}

// TestDecisions: every decision is counted by limiter and outcome, timed,
// its store errors counted by error.type, and traced as a span, child of
// the caller's, with the documented attributes; the key never appears.
func TestDecisions(t *testing.T) {
	tel := newTelemetry(t)
	p := sluice.FixedWindow{Limit: 2, Window: time.Minute}
	api, err := sluice.New(memstore.New(), p, sluice.WithName("api"), sluice.WithObserver(tel.obs), sluice.WithDenyCache(true))
	if err != nil {
		t.Fatal(err)
	}
	dark, err := sluice.New(memstore.New(), p, sluice.WithName("dark"), sluice.WithObserver(tel.obs), sluice.WithShadow(true))
	if err != nil {
		t.Fatal(err)
	}
	login, err := sluice.New(brokenStore{}, p, sluice.WithName("login"), sluice.WithObserver(tel.obs),
		sluice.WithFailMode(sluice.FailClosed), sluice.WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	const key = "user-secret-4242"
	ctx, parent := tel.tp.Tracer("test").Start(context.Background(), "request")
	for range 3 {
		api.Allow(ctx, key) // allowed, allowed, denied by the store
	}
	api.AllowN(ctx, key, 2) // denied by the deny cache
	for range 3 {
		dark.Allow(ctx, key) // allowed, allowed, shadow_denied
	}
	login.Allow(ctx, key) // degraded_denied
	parent.End()

	pts := tel.points(t)
	for id, want := range map[string]float64{
		"sluice.decisions{rate_limit.outcome=allowed,rate_limit.policy=api}":           2,
		"sluice.decisions{rate_limit.outcome=denied,rate_limit.policy=api}":            2,
		"sluice.decisions{rate_limit.outcome=allowed,rate_limit.policy=dark}":          2,
		"sluice.decisions{rate_limit.outcome=shadow_denied,rate_limit.policy=dark}":    1,
		"sluice.decisions{rate_limit.outcome=degraded_denied,rate_limit.policy=login}": 1,
		"sluice.store.errors{error.type=error,rate_limit.policy=login}":                1,
		"sluice.decision.duration{rate_limit.policy=api}":                              4,
		"sluice.decision.duration{rate_limit.policy=login}":                            1,
	} {
		if pts[id] != want {
			t.Errorf("%s = %v, want %v (all: %v)", id, pts[id], want, pts)
		}
	}

	spans := tel.spans.Ended()
	var decisions []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() != "request" {
			decisions = append(decisions, s)
		}
	}
	if len(decisions) != 8 {
		t.Fatalf("%d decision spans, want 8", len(decisions))
	}
	want := []map[string]string{
		{"rate_limit.policy": "api", "rate_limit.decision": "allowed", "rate_limit.outcome": "allowed", "rate_limit.answered_by": "store", "rate_limit.remaining": "1", "rate_limit.retry_after": "0", "rate_limit.cost": "1"},
		{"rate_limit.policy": "api", "rate_limit.decision": "allowed", "rate_limit.answered_by": "store", "rate_limit.remaining": "0"},
		{"rate_limit.policy": "api", "rate_limit.decision": "denied", "rate_limit.outcome": "denied", "rate_limit.answered_by": "store"},
		{"rate_limit.policy": "api", "rate_limit.decision": "denied", "rate_limit.answered_by": "deny_cache", "rate_limit.cost": "2"},
		{"rate_limit.policy": "dark", "rate_limit.decision": "allowed"},
		{"rate_limit.policy": "dark", "rate_limit.decision": "allowed"},
		{"rate_limit.policy": "dark", "rate_limit.decision": "allowed", "rate_limit.outcome": "shadow_denied", "rate_limit.shadow": "true"},
		{"rate_limit.policy": "login", "rate_limit.decision": "denied", "rate_limit.outcome": "degraded_denied", "rate_limit.answered_by": "fail_mode", "error.type": "error", "rate_limit.retry_after": "1"},
	}
	for i, s := range decisions {
		a := attrs(s)
		for k, v := range want[i] {
			if a[k] != v {
				t.Errorf("span %d (%s): %s = %q, want %q (all: %v)", i, s.Name(), k, a[k], v, a)
			}
		}
		for _, k := range []string{"rate_limit.algorithm", "rate_limit.limit", "rate_limit.limit_source"} {
			if a[k] == "" {
				t.Errorf("span %d: no %s", i, k)
			}
		}
		if a["rate_limit.algorithm"] != "fixed_window" || a["rate_limit.limit"] != "2" || a["rate_limit.limit_source"] != "policy" {
			t.Errorf("span %d: %v", i, a)
		}
		if s.Name() != "rate_limit "+a["rate_limit.policy"] {
			t.Errorf("span %d named %q", i, s.Name())
		}
		if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("span %d is not a child of the caller's span", i)
		}
		if s.EndTime().Before(s.StartTime()) {
			t.Errorf("span %d ends before it starts", i)
		}
		if _, hashed := a["rate_limit.key_hash"]; hashed {
			t.Errorf("span %d has a key hash without WithKeyHash", i)
		}
	}
	if st := decisions[7].Status(); st.Code != codes.Error {
		t.Errorf("a degraded decision's span has status %v, want Error", st)
	}
	if m := mentions(spans, key); m != "" {
		t.Errorf("the key appears in clear: %s", m)
	}
	if m := mentions(spans, "connection refused"); m != "" {
		t.Errorf("the store's error message appears (it may quote a key): %s", m)
	}
}

// TestKeyHash: WithKeyHash gives a decision's span the keyed hash of its
// key, the same for the same key and secret, never the key; New refuses a
// short secret.
func TestKeyHash(t *testing.T) {
	if _, err := sluiceotel.New(sluiceotel.WithKeyHash([]byte("short"))); err == nil {
		t.Error("New accepted a 5-byte secret")
	}
	hashes := func(secret string, keys ...string) []string {
		tel := newTelemetry(t, sluiceotel.WithKeyHash([]byte(secret)))
		l, err := sluice.New(memstore.New(), sluice.FixedWindow{Limit: 10, Window: time.Minute}, sluice.WithName("api"), sluice.WithObserver(tel.obs))
		if err != nil {
			t.Fatal(err)
		}
		ctx, parent := tel.tp.Tracer("test").Start(context.Background(), "request")
		for _, k := range keys {
			l.Allow(ctx, k)
		}
		parent.End()
		var out []string
		spans := tel.spans.Ended()
		for _, s := range spans {
			if s.Name() != "request" {
				out = append(out, attrs(s)["rate_limit.key_hash"])
			}
		}
		for _, k := range keys {
			if m := mentions(spans, k); m != "" {
				t.Errorf("the key appears in clear: %s", m)
			}
		}
		return out
	}
	a := hashes("0123456789abcdef-one", "10.0.0.1", "10.0.0.1", "10.0.0.2")
	b := hashes("0123456789abcdef-two", "10.0.0.1")
	if len(a) != 3 || len(a[0]) != 32 || a[0] != a[1] || a[0] == a[2] {
		t.Errorf("hashes %q: want 32 hex digits, equal for the same key, different for another", a)
	}
	if len(b) != 1 || b[0] == a[0] {
		t.Errorf("the same key under another secret hashes to %q, as under the first (%q)", b, a[0])
	}
}

// TestLimiterAtZero: Limiter exports a limiter's counters at zero before
// its first decision.
func TestLimiterAtZero(t *testing.T) {
	tel := newTelemetry(t)
	tel.obs.Limiter("api")
	pts := tel.points(t)
	for _, id := range []string{
		"sluice.decisions{rate_limit.outcome=denied,rate_limit.policy=api}",
		"sluice.store.errors{error.type=timeout,rate_limit.policy=api}",
	} {
		if v, ok := pts[id]; !ok || v != 0 {
			t.Errorf("%s: %v, %v; want 0", id, v, ok)
		}
	}
}

type breakers map[string]valkeystore.BreakerState

func (b breakers) Breakers() map[string]valkeystore.BreakerState { return b }

// TestBreakers: sluice.breaker.state is 1 for each node's state and 0 for
// the others.
func TestBreakers(t *testing.T) {
	tel := newTelemetry(t)
	if _, err := tel.obs.ObserveBreakers(breakers{"10.0.0.1:6379": valkeystore.BreakerOpen, "10.0.0.2:6379": valkeystore.BreakerClosed}); err != nil {
		t.Fatal(err)
	}
	pts := tel.points(t)
	for id, want := range map[string]float64{
		"sluice.breaker.state{rate_limit.breaker.state=open,rate_limit.store.node=10.0.0.1:6379}":      1,
		"sluice.breaker.state{rate_limit.breaker.state=closed,rate_limit.store.node=10.0.0.1:6379}":    0,
		"sluice.breaker.state{rate_limit.breaker.state=half-open,rate_limit.store.node=10.0.0.1:6379}": 0,
		"sluice.breaker.state{rate_limit.breaker.state=closed,rate_limit.store.node=10.0.0.2:6379}":    1,
	} {
		if v, ok := pts[id]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v (all: %v)", id, v, ok, want, pts)
		}
	}
}

// TestUnsampled: a decision whose trace is not sampled, or made outside
// any trace, still counts, and records no span.
func TestUnsampled(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	reader := sdkmetric.NewManualReader()
	o, err := sluiceotel.New(sluiceotel.WithTracerProvider(tp), sluiceotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		t.Fatal(err)
	}
	l, err := sluice.New(memstore.New(), sluice.FixedWindow{Limit: 2, Window: time.Minute}, sluice.WithObserver(o))
	if err != nil {
		t.Fatal(err)
	}
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, Remote: true}))
	l.Allow(ctx, "k")
	if n := len(spans.Ended()); n != 0 {
		t.Errorf("%d spans recorded for an unsampled trace", n)
	}
	l.Allow(context.Background(), "k")
	if n := len(spans.Ended()); n != 0 {
		t.Errorf("%d spans recorded for a decision outside any trace", n)
	}
	tel := &telemetry{reader: reader}
	if v := tel.points(t)["sluice.decisions{rate_limit.outcome=allowed,rate_limit.policy="+l.Name()+"}"]; v != 2 {
		t.Errorf("decisions = %v, want 2", v)
	}
}
