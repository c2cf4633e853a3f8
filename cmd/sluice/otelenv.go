package main

import (
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// sluice serve's OpenTelemetry settings, read from the standard OTEL_*
// variables (docs/observability.md lists those it honours). A variable it
// does not honour, or one whose value it cannot, is refused at start with
// its name: never ignored.

// otelSignal is the OTLP export of one signal (traces or metrics).
type otelSignal struct {
	// protocol is "grpc" or "http/protobuf".
	protocol string
	// endpoint is the URL exported to: for grpc, the scheme (http: without
	// TLS, https: with) and host:port; for http/protobuf, the whole URL,
	// the signal's path included.
	endpoint    *url.URL
	headers     map[string]string
	timeout     time.Duration // 0: the exporter's default (10s)
	compression string        // "", "gzip" or "none"
}

// otelSettings are the OTEL_* variables, read.
type otelSettings struct {
	// traces and metrics are nil when the signal is not exported.
	traces, metrics *otelSignal
	resource        []attribute.KeyValue
	sampler         sdktrace.Sampler
	samplerName     string
	propagator      propagation.TextMapPropagator
	bsp             []sdktrace.BatchSpanProcessorOption
	metricInterval  time.Duration // 0: the default (60s)
	metricTimeout   time.Duration // 0: the default (30s)
}

// otelHonoured are the variables sluice serve honours; any other OTEL_*
// variable is refused.
var otelHonoured = map[string]bool{
	"OTEL_SDK_DISABLED": true, "OTEL_SERVICE_NAME": true, "OTEL_RESOURCE_ATTRIBUTES": true,
	"OTEL_TRACES_EXPORTER": true, "OTEL_METRICS_EXPORTER": true, "OTEL_LOGS_EXPORTER": true,
	"OTEL_TRACES_SAMPLER": true, "OTEL_TRACES_SAMPLER_ARG": true, "OTEL_PROPAGATORS": true,
	"OTEL_BSP_SCHEDULE_DELAY": true, "OTEL_BSP_EXPORT_TIMEOUT": true, "OTEL_BSP_MAX_QUEUE_SIZE": true, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": true,
	"OTEL_METRIC_EXPORT_INTERVAL": true, "OTEL_METRIC_EXPORT_TIMEOUT": true,
}

// otelPerSignal are the OTLP exporter settings, each as
// OTEL_EXPORTER_OTLP_<name> and per signal OTEL_EXPORTER_OTLP_TRACES_<name>
// and OTEL_EXPORTER_OTLP_METRICS_<name>.
var otelPerSignal = []string{"ENDPOINT", "PROTOCOL", "HEADERS", "TIMEOUT", "COMPRESSION"}

func init() {
	for _, n := range otelPerSignal {
		for _, s := range []string{"", "TRACES_", "METRICS_"} {
			otelHonoured["OTEL_EXPORTER_OTLP_"+s+n] = true
		}
	}
}

// readOtel reads the OTEL_* variables: names are those set (from the
// process environment), env looks their values up. nil settings and no
// error: nothing is exported.
func readOtel(names []string, env func(string) (string, bool)) (*otelSettings, error) {
	var unknown []string
	for _, n := range names {
		if strings.HasPrefix(n, "OTEL_") && !otelHonoured[n] {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("%s: not a variable sluice serve honours (docs/observability.md lists those it does); unset it", strings.Join(unknown, ", "))
	}
	get := func(name string) string {
		v, _ := env(name)
		return strings.TrimSpace(v)
	}
	switch v := get("OTEL_SDK_DISABLED"); strings.ToLower(v) {
	case "true":
		return nil, nil
	case "", "false":
	default:
		return nil, fmt.Errorf("OTEL_SDK_DISABLED=%q: want true or false", v)
	}
	if v := get("OTEL_LOGS_EXPORTER"); v != "" && v != "none" {
		return nil, fmt.Errorf("OTEL_LOGS_EXPORTER=%q: sluice serve exports no logs over OTLP (it logs to stderr); unset it or set none", v)
	}
	s := &otelSettings{}
	var err error
	if s.traces, err = readSignal("TRACES", "/v1/traces", get); err != nil {
		return nil, err
	}
	if s.metrics, err = readSignal("METRICS", "/v1/metrics", get); err != nil {
		return nil, err
	}
	if s.traces == nil && s.metrics == nil {
		return nil, nil
	}
	if s.resource, err = readResource(get); err != nil {
		return nil, err
	}
	if s.sampler, s.samplerName, err = readSampler(get); err != nil {
		return nil, err
	}
	if s.propagator, err = readPropagators(get); err != nil {
		return nil, err
	}
	if err := s.readDurations(get); err != nil {
		return nil, err
	}
	return s, nil
}

// readSignal reads the export of one signal ("TRACES" or "METRICS"), whose
// OTLP/HTTP path is path; nil when it is not exported: its exporter is
// none, or neither OTEL_EXPORTER_OTLP_ENDPOINT nor its own endpoint is set
// (and its exporter is not otlp).
func readSignal(signal, path string, get func(string) string) (*otelSignal, error) {
	exporterVar := "OTEL_" + signal + "_EXPORTER"
	exporter := get(exporterVar)
	switch exporter {
	case "", "otlp":
	case "none":
		return nil, nil
	default:
		return nil, fmt.Errorf("%s=%q: sluice serve exports over OTLP only; want otlp or none", exporterVar, exporter)
	}
	v := otlpVars{signal: signal, get: get}
	endpoint, endpointVar := v.pick("ENDPOINT")
	if endpoint == "" && exporter == "" {
		return nil, nil // nothing says to export
	}
	sig := &otelSignal{}
	var err error
	if sig.protocol, err = v.protocol(); err != nil {
		return nil, err
	}
	if sig.endpoint, err = v.endpoint(endpoint, endpointVar, sig.protocol, path); err != nil {
		return nil, err
	}
	if err := v.options(sig); err != nil {
		return nil, err
	}
	return sig, nil
}

// otlpVars reads the OTEL_EXPORTER_OTLP_* variables of one signal.
type otlpVars struct {
	signal string // "TRACES" or "METRICS"
	get    func(string) string
}

// pick returns the per-signal variable when set, else the general one,
// and the name of the variable it came from.
func (v otlpVars) pick(name string) (string, string) {
	own := "OTEL_EXPORTER_OTLP_" + v.signal + "_" + name
	if x := v.get(own); x != "" {
		return x, own
	}
	general := "OTEL_EXPORTER_OTLP_" + name
	return v.get(general), general
}

// protocol reads the signal's protocol (default http/protobuf).
func (v otlpVars) protocol() (string, error) {
	p, pVar := v.pick("PROTOCOL")
	switch p {
	case "":
		return "http/protobuf", nil
	case "grpc", "http/protobuf":
		return p, nil
	case "http/json":
		return "", fmt.Errorf("%s=%q: the OpenTelemetry Go exporters send no JSON; want grpc or http/protobuf", pVar, p)
	default:
		return "", fmt.Errorf("%s=%q: want grpc or http/protobuf", pVar, p)
	}
}

// endpoint returns the URL the signal is exported to, from endpoint (read
// from endpointVar; "" for the specification's default of protocol): for
// http/protobuf from the general variable, with the signal's path
// appended.
func (v otlpVars) endpoint(endpoint, endpointVar, protocol, path string) (*url.URL, error) {
	if endpoint == "" {
		// OTEL_<signal>_EXPORTER=otlp alone: the specification's defaults.
		endpoint, endpointVar = "http://localhost:4318", "OTEL_EXPORTER_OTLP_ENDPOINT (default)"
		if protocol == "grpc" {
			endpoint = "http://localhost:4317"
		}
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("%s=%q: want a URL such as http://collector:4318 (the scheme http or https, a host, no credentials)", endpointVar, endpoint)
	}
	if protocol == "http/protobuf" && !strings.Contains(endpointVar, v.signal) {
		// The general endpoint is a base: the signal's path is appended.
		u.Path = strings.TrimSuffix(u.Path, "/") + path
	}
	if protocol == "grpc" && strings.Trim(u.Path, "/") != "" {
		return nil, fmt.Errorf("%s=%q: an OTLP/gRPC endpoint has no path", endpointVar, endpoint)
	}
	return u, nil
}

// options reads the signal's headers, timeout and compression into sig.
func (v otlpVars) options(sig *otelSignal) error {
	var err error
	if h, hVar := v.pick("HEADERS"); h != "" {
		if sig.headers, err = parseKeyValues(h); err != nil {
			return fmt.Errorf("%s: %w", hVar, err) // not the value: it may hold a secret
		}
	}
	if t, tVar := v.pick("TIMEOUT"); t != "" {
		if sig.timeout, err = millis(tVar, t); err != nil {
			return err
		}
	}
	if c, cVar := v.pick("COMPRESSION"); c != "" {
		if c != "gzip" && c != "none" {
			return fmt.Errorf("%s=%q: want gzip or none", cVar, c)
		}
		sig.compression = c
	}
	return nil
}

// parseKeyValues reads a W3C-baggage-like list, key=value,key=value, its
// values percent-encoded (OTEL_RESOURCE_ATTRIBUTES, OTEL_EXPORTER_OTLP_HEADERS).
func parseKeyValues(s string) (map[string]string, error) {
	out := map[string]string{}
	for i, item := range strings.Split(s, ",") {
		if strings.TrimSpace(item) == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("item %d is not key=value", i+1)
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("item %d (%s): %w", i+1, k, err)
		}
		out[k] = dv
	}
	return out, nil
}

// readResource reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME (which
// wins for service.name; default "sluice").
func readResource(get func(string) string) ([]attribute.KeyValue, error) {
	kv, err := parseKeyValues(get("OTEL_RESOURCE_ATTRIBUTES"))
	if err != nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	if n := get("OTEL_SERVICE_NAME"); n != "" {
		kv["service.name"] = n
	}
	if kv["service.name"] == "" {
		kv["service.name"] = "sluice"
	}
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []attribute.KeyValue
	for _, k := range keys {
		out = append(out, attribute.String(k, kv[k]))
	}
	return out, nil
}

// readSampler reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG
// (default parentbased_always_on).
func readSampler(get func(string) string) (sdktrace.Sampler, string, error) {
	name := get("OTEL_TRACES_SAMPLER")
	if name == "" {
		name = "parentbased_always_on"
	}
	arg := get("OTEL_TRACES_SAMPLER_ARG")
	ratio := 1.0
	if strings.HasSuffix(name, "traceidratio") {
		if arg != "" {
			r, err := strconv.ParseFloat(arg, 64)
			if err != nil || r < 0 || r > 1 {
				return nil, "", fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: want a ratio from 0 to 1 for %s", arg, name)
			}
			ratio = r
		}
	} else if arg != "" {
		return nil, "", fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: the sampler %s takes no argument; unset it", arg, name)
	}
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample(), name, nil
	case "always_off":
		return sdktrace.NeverSample(), name, nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio), name, nil
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), name, nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), name, nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), name, nil
	}
	return nil, "", fmt.Errorf("OTEL_TRACES_SAMPLER=%q: want always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", name)
}

// readPropagators reads OTEL_PROPAGATORS (default tracecontext,baggage).
func readPropagators(get func(string) string) (propagation.TextMapPropagator, error) {
	v := get("OTEL_PROPAGATORS")
	if v == "" {
		v = "tracecontext,baggage"
	}
	var ps []propagation.TextMapPropagator
	var seen []string
	for _, p := range strings.Split(v, ",") {
		p = strings.TrimSpace(p)
		if slices.Contains(seen, p) {
			continue
		}
		seen = append(seen, p)
		switch p {
		case "tracecontext":
			ps = append(ps, propagation.TraceContext{})
		case "baggage":
			ps = append(ps, propagation.Baggage{})
		case "none":
		default:
			return nil, fmt.Errorf("OTEL_PROPAGATORS=%q: %q is not one sluice serve has; want tracecontext, baggage or none", v, p)
		}
	}
	return propagation.NewCompositeTextMapPropagator(ps...), nil
}

// readDurations reads the batch span processor's and the metric reader's
// settings.
func (s *otelSettings) readDurations(get func(string) string) error {
	for _, d := range []struct {
		name string
		set  func(time.Duration)
	}{
		{"OTEL_BSP_SCHEDULE_DELAY", func(t time.Duration) { s.bsp = append(s.bsp, sdktrace.WithBatchTimeout(t)) }},
		{"OTEL_BSP_EXPORT_TIMEOUT", func(t time.Duration) { s.bsp = append(s.bsp, sdktrace.WithExportTimeout(t)) }},
		{"OTEL_METRIC_EXPORT_INTERVAL", func(t time.Duration) { s.metricInterval = t }},
		{"OTEL_METRIC_EXPORT_TIMEOUT", func(t time.Duration) { s.metricTimeout = t }},
	} {
		if v := get(d.name); v != "" {
			t, err := millis(d.name, v)
			if err != nil {
				return err
			}
			if t == 0 {
				return fmt.Errorf("%s=%q: want a positive number of milliseconds", d.name, v)
			}
			d.set(t)
		}
	}
	for _, n := range []struct {
		name string
		set  func(int)
	}{
		{"OTEL_BSP_MAX_QUEUE_SIZE", func(n int) { s.bsp = append(s.bsp, sdktrace.WithMaxQueueSize(n)) }},
		{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", func(n int) { s.bsp = append(s.bsp, sdktrace.WithMaxExportBatchSize(n)) }},
	} {
		if v := get(n.name); v != "" {
			i, err := strconv.Atoi(v)
			if err != nil || i <= 0 {
				return fmt.Errorf("%s=%q: want a positive integer", n.name, v)
			}
			n.set(i)
		}
	}
	return nil
}

// millis reads a number of milliseconds.
func millis(name, v string) (time.Duration, error) {
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms < 0 || ms > int64(24*time.Hour/time.Millisecond) {
		return 0, fmt.Errorf("%s=%q: want a number of milliseconds (0 to 86400000)", name, v)
	}
	return time.Duration(ms) * time.Millisecond, nil
}
