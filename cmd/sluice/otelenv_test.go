package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// otelEnv returns readOtel's arguments for the variables vars.
func otelEnv(vars map[string]string) ([]string, func(string) (string, bool)) {
	var names []string
	for k := range vars {
		names = append(names, k)
	}
	return names, func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

// TestReadOtelOff: without the variables that say to export, nothing is
// exported; OTEL_SDK_DISABLED=true turns everything off; an exporter of
// none turns its signal off.
func TestReadOtelOff(t *testing.T) {
	for _, vars := range []map[string]string{
		{},
		{"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"},
	} {
		s, err := readOtel(otelEnv(vars))
		if err != nil || s != nil {
			t.Errorf("%v: %+v, %v; want nothing exported", vars, s, err)
		}
	}
	s, err := readOtel(otelEnv(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}))
	if err != nil || s == nil || s.traces != nil || s.metrics == nil {
		t.Errorf("traces exporter none: %+v, %v; want metrics only", s, err)
	}
}

// TestReadOtelEndpoints: the general endpoint is a base for OTLP/HTTP (the
// signal's path appended), a per-signal one is used as it is and wins; the
// protocol defaults to http/protobuf, and per signal wins too; an exporter
// of otlp alone exports to the specification's default endpoint.
func TestReadOtelEndpoints(t *testing.T) {
	s, err := readOtel(otelEnv(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT":           "https://c.example:4318/base/",
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT":   "http://m.example:4317",
		"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL":   "grpc",
		"OTEL_EXPORTER_OTLP_HEADERS":            "authorization=Bearer%20abc,x-team=edge",
		"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT":     "2500",
		"OTEL_EXPORTER_OTLP_COMPRESSION":        "gzip",
		"OTEL_RESOURCE_ATTRIBUTES":              "deployment.environment=prod,service.name=ignored",
		"OTEL_SERVICE_NAME":                     "edge-limiter",
		"OTEL_TRACES_SAMPLER":                   "parentbased_traceidratio",
		"OTEL_TRACES_SAMPLER_ARG":               "0.25",
		"OTEL_PROPAGATORS":                      "tracecontext",
		"OTEL_METRIC_EXPORT_INTERVAL":           "15000",
		"OTEL_BSP_MAX_EXPORT_BATCH_SIZE":        "256",
		"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "none",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if s.traces.protocol != "http/protobuf" || s.traces.endpoint.String() != "https://c.example:4318/base/v1/traces" ||
		s.traces.headers["authorization"] != "Bearer abc" || s.traces.timeout.Milliseconds() != 2500 || s.traces.compression != "none" {
		t.Errorf("traces: %+v", s.traces)
	}
	if s.metrics.protocol != "grpc" || s.metrics.endpoint.String() != "http://m.example:4317" || s.metrics.compression != "gzip" || s.metrics.headers["x-team"] != "edge" {
		t.Errorf("metrics: %+v", s.metrics)
	}
	res := map[string]string{}
	for _, a := range s.resource {
		res[string(a.Key)] = a.Value.AsString()
	}
	if res["service.name"] != "edge-limiter" || res["deployment.environment"] != "prod" {
		t.Errorf("resource: %v", res)
	}
	if s.samplerName != "parentbased_traceidratio" || !strings.Contains(s.sampler.Description(), "0.25") {
		t.Errorf("sampler: %s %s", s.samplerName, s.sampler.Description())
	}
	if s.metricInterval.Seconds() != 15 || len(s.bsp) != 1 {
		t.Errorf("interval %v, batch options %d", s.metricInterval, len(s.bsp))
	}
	if f := s.propagator.Fields(); len(f) != 2 || !slices.Contains(f, "traceparent") || !slices.Contains(f, "tracestate") {
		t.Errorf("propagator fields %v, want traceparent and tracestate only", f)
	}

	s, err = readOtel(otelEnv(map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}))
	if err != nil || s.traces.endpoint.String() != "http://localhost:4317" || s.metrics != nil {
		t.Errorf("OTEL_TRACES_EXPORTER=otlp alone: %+v, %v", s, err)
	}
	res = map[string]string{}
	for _, a := range s.resource {
		res[string(a.Key)] = a.Value.AsString()
	}
	if res["service.name"] != "sluice" || s.samplerName != "parentbased_always_on" {
		t.Errorf("defaults: resource %v, sampler %s", res, s.samplerName)
	}
}

// TestReadOtelRefuses: a variable sluice serve does not honour, or a value
// it cannot, is refused with the variable's name (and never a header's
// value, which may be a secret).
func TestReadOtelRefuses(t *testing.T) {
	const ep = "http://c:4318"
	for _, c := range []struct {
		vars map[string]string
		want string
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_INSECURE": "true"}, "OTEL_EXPORTER_OTLP_INSECURE"},
		{map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": "/ca.pem", "OTEL_ATTRIBUTE_COUNT_LIMIT": "3"}, "OTEL_ATTRIBUTE_COUNT_LIMIT, OTEL_EXPORTER_OTLP_CERTIFICATE"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "thrift"}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317"}, "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{map[string]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://user:pw@c:4318"}, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317/x", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "no path"},
		{map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"},
		{map[string]string{"OTEL_METRICS_EXPORTER": "prometheus"}, "OTEL_METRICS_EXPORTER"},
		{map[string]string{"OTEL_LOGS_EXPORTER": "otlp"}, "OTEL_LOGS_EXPORTER"},
		{map[string]string{"OTEL_SDK_DISABLED": "yes"}, "OTEL_SDK_DISABLED"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_TRACES_SAMPLER": "xray"}, "OTEL_TRACES_SAMPLER"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1.5"}, "OTEL_TRACES_SAMPLER_ARG"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_TRACES_SAMPLER": "always_on", "OTEL_TRACES_SAMPLER_ARG": "0.5"}, "OTEL_TRACES_SAMPLER_ARG"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_PROPAGATORS": "tracecontext,b3"}, "OTEL_PROPAGATORS"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_RESOURCE_ATTRIBUTES": "novalue"}, "OTEL_RESOURCE_ATTRIBUTES"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_EXPORTER_OTLP_TIMEOUT": "10s"}, "OTEL_EXPORTER_OTLP_TIMEOUT"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION": "zstd"}, "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_METRIC_EXPORT_INTERVAL": "0"}, "OTEL_METRIC_EXPORT_INTERVAL"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_BSP_MAX_QUEUE_SIZE": "-1"}, "OTEL_BSP_MAX_QUEUE_SIZE"},
	} {
		_, err := readOtel(otelEnv(c.vars))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %s", c.vars, err, c.want)
		}
	}
	_, err := readOtel(otelEnv(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_EXPORTER_OTLP_HEADERS": "authorization=s3cret%zz"}))
	if err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_HEADERS") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("a malformed header: %v, want an error naming the variable, not its value", err)
	}
}

// TestE2EOtelRefused: sluice serve refuses to start, exit code 2, with the
// variable's name, when an OTEL_* variable cannot be honoured.
func TestE2EOtelRefused(t *testing.T) {
	for _, env := range []string{"OTEL_EXPORTER_OTLP_INSECURE=true", "OTEL_EXPORTER_OTLP_PROTOCOL=http/json"} {
		name, _, _ := strings.Cut(env, "=")
		cmd := exec.Command(binary(t), "serve", "--listen", "127.0.0.1:0", "--grpc-listen", "off")
		cmd.Env = append(os.Environ(), env, "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:1")
		cmd.Dir = t.TempDir()
		out, err := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); err == nil || code != 2 || !strings.Contains(string(out), name) {
			t.Errorf("%s: exit %d, output:\n%s\nwant exit 2 naming %s", env, code, out, name)
		}
	}
}
