package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/buildinfo"
	"github.com/sluicehq/sluice/cmd/sluice/internal/server"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/sluiceotel"
	"github.com/sluicehq/sluice/valkeystore"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
)

// sluice serve's OpenTelemetry: traces and metrics over OTLP when the
// OTEL_* variables say so (otelenv.go reads them), nothing otherwise.

// telemetry is sluice serve's OpenTelemetry; its zero value (off) does
// nothing.
type telemetry struct {
	on   bool
	tp   *sdktrace.TracerProvider // nil when traces are not exported
	mp   *sdkmetric.MeterProvider // nil when metrics are not exported
	prop propagation.TextMapPropagator
	obs  *sluiceotel.Observer
}

// startTelemetry reads the OTEL_* variables and starts their exporters;
// nil and an exit code when a variable is refused.
func startTelemetry(env func(string) (string, bool), logger *slog.Logger, stderr io.Writer) (*telemetry, int) {
	var names []string
	for _, kv := range os.Environ() {
		if n, _, _ := strings.Cut(kv, "="); strings.HasPrefix(n, "OTEL_") {
			names = append(names, n)
		}
	}
	set, err := readOtel(names, env)
	if err != nil {
		logger.Error("OpenTelemetry settings rejected", "err", err.Error())
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return nil, 2
	}
	if set == nil {
		return &telemetry{}, 0
	}
	t, err := newTelemetry(set)
	if err != nil {
		logger.Error("OpenTelemetry exporters", "err", err.Error())
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return nil, 2
	}
	logger.Info("exporting over OTLP", "traces", describeSignal(set.traces), "metrics", describeSignal(set.metrics),
		"sampler", set.samplerName)
	return t, 0
}

// describeSignal is a signal's export for the log (never its headers).
func describeSignal(s *otelSignal) string {
	if s == nil {
		return "off"
	}
	return s.protocol + " " + s.endpoint.String()
}

func newTelemetry(set *otelSettings) (*telemetry, error) {
	ctx := context.Background()
	bi := buildinfo.Read()
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.version", bi.Version)),
		resource.WithAttributes(set.resource...))
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry resource: %w", err)
	}
	t := &telemetry{on: true, prop: set.propagator}
	var tp trace.TracerProvider = tracenoop.NewTracerProvider()
	var mp metric.MeterProvider = metricnoop.NewMeterProvider()
	if s := set.traces; s != nil {
		exp, err := traceExporter(ctx, s)
		if err != nil {
			return nil, err
		}
		t.tp = sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSampler(set.sampler),
			sdktrace.WithBatcher(exp, set.bsp...))
		tp = t.tp
	}
	if s := set.metrics; s != nil {
		exp, err := metricExporter(ctx, s)
		if err != nil {
			return nil, err
		}
		var ropts []sdkmetric.PeriodicReaderOption
		if set.metricInterval > 0 {
			ropts = append(ropts, sdkmetric.WithInterval(set.metricInterval))
		}
		if set.metricTimeout > 0 {
			ropts = append(ropts, sdkmetric.WithTimeout(set.metricTimeout))
		}
		t.mp = sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, ropts...)))
		mp = t.mp
	}
	if t.obs, err = sluiceotel.New(sluiceotel.WithTracerProvider(tp), sluiceotel.WithMeterProvider(mp)); err != nil {
		return nil, err
	}
	return t, nil
}

// traceExporter is the OTLP span exporter of s.
func traceExporter(ctx context.Context, s *otelSignal) (sdktrace.SpanExporter, error) {
	if s.protocol == "grpc" {
		return otlptracegrpc.New(ctx, exporterOptions(s, otlptracegrpc.WithEndpointURL, otlptracegrpc.WithHeaders, otlptracegrpc.WithTimeout,
			grpcCompression(otlptracegrpc.WithCompressor))...)
	}
	return otlptracehttp.New(ctx, exporterOptions(s, otlptracehttp.WithEndpointURL, otlptracehttp.WithHeaders, otlptracehttp.WithTimeout,
		httpCompression(otlptracehttp.WithCompression, otlptracehttp.GzipCompression, otlptracehttp.NoCompression))...)
}

// metricExporter is the OTLP metric exporter of s.
func metricExporter(ctx context.Context, s *otelSignal) (sdkmetric.Exporter, error) {
	if s.protocol == "grpc" {
		return otlpmetricgrpc.New(ctx, exporterOptions(s, otlpmetricgrpc.WithEndpointURL, otlpmetricgrpc.WithHeaders, otlpmetricgrpc.WithTimeout,
			grpcCompression(otlpmetricgrpc.WithCompressor))...)
	}
	return otlpmetrichttp.New(ctx, exporterOptions(s, otlpmetrichttp.WithEndpointURL, otlpmetrichttp.WithHeaders, otlpmetrichttp.WithTimeout,
		httpCompression(otlpmetrichttp.WithCompression, otlpmetrichttp.GzipCompression, otlpmetrichttp.NoCompression))...)
}

// exporterOptions are the options of an OTLP exporter of s, made by the
// exporter package's own functions: the endpoint, the headers and timeout
// when set, and the compression when compression has an option for it.
func exporterOptions[O any](s *otelSignal, endpoint func(string) O, headers func(map[string]string) O, timeout func(time.Duration) O,
	compression func(string) (O, bool)) []O {
	opts := []O{endpoint(s.endpoint.String())}
	if len(s.headers) > 0 {
		opts = append(opts, headers(s.headers))
	}
	if s.timeout > 0 {
		opts = append(opts, timeout(s.timeout))
	}
	if o, ok := compression(s.compression); ok {
		opts = append(opts, o)
	}
	return opts
}

// grpcCompression is the compression option of an OTLP/gRPC exporter:
// gzip by its compressor name; none is its default.
func grpcCompression[O any](withCompressor func(string) O) func(string) (O, bool) {
	return func(c string) (O, bool) {
		var o O
		if c != "gzip" {
			return o, false
		}
		return withCompressor("gzip"), true
	}
}

// httpCompression is the compression option of an OTLP/HTTP exporter:
// gzip or none.
func httpCompression[O, C any](with func(C) O, gzip, none C) func(string) (O, bool) {
	return func(c string) (O, bool) {
		switch c {
		case "gzip":
			return with(gzip), true
		case "none":
			return with(none), true
		}
		var o O
		return o, false
	}
}

// storeOptions are the Valkey store's options: its client instrumented by
// valkeyotel (command spans, keys redacted) when exporting.
func (t *telemetry) storeOptions() []valkeystore.Option {
	if !t.on {
		return nil
	}
	return []valkeystore.Option{valkeystore.WithClientWrap(t.obs.WrapValkey)}
}

// observer is what the limiters report their decisions to besides the
// Prometheus metrics (nil when not exporting); the breakers of st, when
// it has any, are exported too.
func (t *telemetry) observer(st driver.Store, logger *slog.Logger) sluice.Observer {
	if !t.on {
		return nil
	}
	if b, ok := st.(sluiceotel.Breakers); ok {
		if _, err := t.obs.ObserveBreakers(b); err != nil {
			logger.Warn("cannot export the breakers' state over OTLP", "err", err.Error())
		}
	}
	return t.obs
}

// observeGrants exports the grant metrics of the policies with grants
// (grants: auto) over OTLP, when exporting metrics: read from stats at
// each collection, the policies served then (a reload that gives a policy
// grants or takes them away shows at the next), as /metrics's
// sluice_grant_* (the same counters, by the same limiter names, except
// that they never go back: Server.GrantStats). An error
// (logged) when it cannot: serve then does not start, rather than export
// the OTLP metrics without them.
func (t *telemetry) observeGrants(stats func() map[string]sluice.GrantStats, logger *slog.Logger) error {
	if t.mp == nil {
		return nil
	}
	if _, err := t.obs.ObserveGrantsFunc(stats); err != nil {
		logger.Error("cannot export the grant metrics over OTLP", "err", err.Error())
		return err
	}
	return nil
}

// instrument makes l's HTTP and gRPC servers continue the caller's trace
// (W3C traceparent) in a server span per request, when exporting. The gRPC
// server (not serving yet) is replaced by one with OpenTelemetry's stats
// handler.
func (t *telemetry) instrument(l *listeners, srv *server.Server) {
	if !t.on {
		return
	}
	tp := t.tracerProvider()
	l.http.Handler = httpTracing(l.http.Handler, tp.Tracer("github.com/sluicehq/sluice/cmd/sluice"), t.prop)
	if l.grpc != nil {
		var mp metric.MeterProvider = metricnoop.NewMeterProvider()
		if t.mp != nil {
			mp = t.mp
		}
		l.grpc = srv.NewGRPCServer(grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithTracerProvider(tp), otelgrpc.WithMeterProvider(mp), otelgrpc.WithPropagators(t.prop))))
	}
}

func (t *telemetry) tracerProvider() trace.TracerProvider {
	if t.tp == nil {
		return tracenoop.NewTracerProvider()
	}
	return t.tp
}

// shutdown exports what is pending, within 5 seconds.
func (t *telemetry) shutdown(logger *slog.Logger) {
	if !t.on {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if t.tp != nil {
		if err := t.tp.Shutdown(ctx); err != nil {
			logger.Warn("OTLP traces: shutdown", "err", err.Error())
		}
	}
	if t.mp != nil {
		if err := t.mp.Shutdown(ctx); err != nil {
			logger.Warn("OTLP metrics: shutdown", "err", err.Error())
		}
	}
}

// httpTracing continues the caller's trace (from its traceparent header,
// by prop) in a server span per request, named by the route's pattern
// ("POST /v1/check"), with the method, route and status code only: not the
// URL's path or query, nor the client's address, which may hold keys (the
// admin routes' paths do, and a key is often the client's IP address).
// otelhttp records those, hence this.
func httpTracing(next http.Handler, tracer trace.Tracer, prop propagation.TextMapPropagator) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tracer.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", r.Method)))
		defer span.End()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		r = r.WithContext(ctx)
		next.ServeHTTP(sw, r)
		if r.Pattern != "" {
			route := r.Pattern
			if _, path, ok := strings.Cut(route, " "); ok {
				route = path
			}
			span.SetName(r.Method + " " + route)
			span.SetAttributes(attribute.String("http.route", route))
		}
		span.SetAttributes(attribute.Int("http.response.status_code", sw.code))
		if sw.code >= 500 {
			span.SetStatus(codes.Error, http.StatusText(sw.code))
		}
	})
}

// statusWriter records the status code written.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the writer's own methods.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush passes a flush on (the writer is an http.Flusher).
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
