package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice/valkeytest"
	collmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	colltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is a real OTLP receiver: the OTLP/gRPC trace and metrics
// services (the protocol's generated services, go.opentelemetry.io/proto/otlp)
// and OTLP/HTTP's POST /v1/traces and /v1/metrics (protobuf bodies). It
// keeps every request, and its raw bytes.
type otlpReceiver struct {
	colltrace.UnimplementedTraceServiceServer
	GRPC, HTTP string // host:port
	mu         sync.Mutex
	traces     []*colltrace.ExportTraceServiceRequest
	metrics    []*collmetrics.ExportMetricsServiceRequest
	raw        [][]byte
}

func startReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	colltrace.RegisterTraceServiceServer(g, r)
	collmetrics.RegisterMetricsServiceServer(g, metricsService{r: r})
	go g.Serve(gl)
	t.Cleanup(g.Stop)
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, req *http.Request) {
		var m colltrace.ExportTraceServiceRequest
		if r.readHTTP(w, req, &m) {
			r.addTraces(&m)
			r.replyHTTP(w, &colltrace.ExportTraceServiceResponse{})
		}
	})
	mux.HandleFunc("POST /v1/metrics", func(w http.ResponseWriter, req *http.Request) {
		var m collmetrics.ExportMetricsServiceRequest
		if r.readHTTP(w, req, &m) {
			r.addMetrics(&m)
			r.replyHTTP(w, &collmetrics.ExportMetricsServiceResponse{})
		}
	})
	hs := &http.Server{Handler: mux}
	go hs.Serve(hl)
	t.Cleanup(func() { hs.Close() })
	r.GRPC, r.HTTP = gl.Addr().String(), hl.Addr().String()
	return r
}

func (r *otlpReceiver) readHTTP(w http.ResponseWriter, req *http.Request, m proto.Message) bool {
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "want application/x-protobuf, got "+ct, http.StatusUnsupportedMediaType)
		return false
	}
	body, err := io.ReadAll(req.Body)
	if err == nil {
		err = proto.Unmarshal(body, m)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func (r *otlpReceiver) replyHTTP(w http.ResponseWriter, m proto.Message) {
	b, _ := proto.Marshal(m)
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(b)
}

func (r *otlpReceiver) addTraces(m *colltrace.ExportTraceServiceRequest) {
	b, _ := proto.Marshal(m)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.traces = append(r.traces, m)
	r.raw = append(r.raw, b)
}

func (r *otlpReceiver) addMetrics(m *collmetrics.ExportMetricsServiceRequest) {
	b, _ := proto.Marshal(m)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.metrics = append(r.metrics, m)
	r.raw = append(r.raw, b)
}

func (r *otlpReceiver) Export(_ context.Context, m *colltrace.ExportTraceServiceRequest) (*colltrace.ExportTraceServiceResponse, error) {
	r.addTraces(m)
	return &colltrace.ExportTraceServiceResponse{}, nil
}

// metricsService is the receiver's OTLP/gRPC metrics service (Export is
// taken by the trace service's).
type metricsService struct {
	collmetrics.UnimplementedMetricsServiceServer
	r *otlpReceiver
}

func (s metricsService) Export(_ context.Context, m *collmetrics.ExportMetricsServiceRequest) (*collmetrics.ExportMetricsServiceResponse, error) {
	s.r.addMetrics(m)
	return &collmetrics.ExportMetricsServiceResponse{}, nil
}

// span is a received span with its resource's attributes.
type span struct {
	*tracepb.Span
	resource map[string]string
}

func (r *otlpReceiver) spans() []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []span
	for _, req := range r.traces {
		for _, rs := range req.ResourceSpans {
			res := kv(rs.GetResource().GetAttributes())
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					out = append(out, span{s, res})
				}
			}
		}
	}
	return out
}

// metricPoints returns the attribute sets of each metric's points, with
// its resource's service.name.
func (r *otlpReceiver) metricPoints() map[string][]map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]map[string]string{}
	for _, req := range r.metrics {
		for _, rm := range req.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					var sets [][]*commonpb.KeyValue
					switch d := m.Data.(type) {
					case *metricspb.Metric_Sum:
						for _, p := range d.Sum.DataPoints {
							sets = append(sets, p.Attributes)
						}
					case *metricspb.Metric_Gauge:
						for _, p := range d.Gauge.DataPoints {
							sets = append(sets, p.Attributes)
						}
					case *metricspb.Metric_Histogram:
						for _, p := range d.Histogram.DataPoints {
							sets = append(sets, p.Attributes)
						}
					}
					for _, s := range sets {
						a := kv(s)
						a["service.name (resource)"] = kv(rm.GetResource().GetAttributes())["service.name"]
						out[m.Name] = append(out[m.Name], a)
					}
				}
			}
		}
	}
	return out
}

func kv(attrs []*commonpb.KeyValue) map[string]string {
	out := map[string]string{}
	for _, a := range attrs {
		v := a.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			out[a.Key] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			out[a.Key] = fmt.Sprint(x.IntValue)
		case *commonpb.AnyValue_DoubleValue:
			out[a.Key] = fmt.Sprint(x.DoubleValue)
		case *commonpb.AnyValue_BoolValue:
			out[a.Key] = fmt.Sprint(x.BoolValue)
		}
	}
	return out
}

// TestE2EOpenTelemetry: sluice serve, with the standard OTEL_* variables
// pointing at a real OTLP receiver (traces over OTLP/gRPC, metrics over
// OTLP/HTTP, by the per-signal variables), continues the callers' traces
// from their traceparent on HTTP and on Envoy's gRPC service (with a
// sampler that samples only what the caller sampled), exports a span per
// decision with the documented rate_limit.* attributes under the request's
// span, valkeyotel's command spans, and the decision metrics, under the
// service name and resource attributes given; no key appears in clear in
// anything it sends.
func TestE2EOpenTelemetry(t *testing.T) {
	vk := valkeytest.Start(t)
	t.Run("traces over gRPC, metrics over HTTP", func(t *testing.T) {
		recv := startReceiver(t)
		testOTLP(t, recv, vk.Addr, []string{
			"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + recv.GRPC,
			"OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
			"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=http://" + recv.HTTP + "/v1/metrics",
			"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL=http/protobuf",
		})
	})
	t.Run("traces over HTTP (the base endpoint), metrics over gRPC", func(t *testing.T) {
		recv := startReceiver(t)
		testOTLP(t, recv, vk.Addr, []string{
			"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + recv.HTTP,
			"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=http://" + recv.GRPC,
			"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL=grpc",
		})
	})
}

// testOTLP runs sluice serve on the Valkey at valkey with the endpoint
// variables env pointing at recv, and checks what recv receives.
func testOTLP(t *testing.T, recv *otlpReceiver, valkey string, env []string) {
	const httpKey, grpcKey = "secret-http-key-7731", "secret-grpc-key-9902"
	p := serve(t, append(env,
		"OTEL_SERVICE_NAME=sluice-e2e",
		"OTEL_RESOURCE_ATTRIBUTES=deployment.environment=test,team=edge%20limits",
		"OTEL_TRACES_SAMPLER=parentbased_always_off",
		"OTEL_BSP_SCHEDULE_DELAY=100",
		"OTEL_METRIC_EXPORT_INTERVAL=200",
	), "--valkey", valkey)
	waitReady(t, p) // connected to Valkey: decisions by the store, not the fail mode

	const (
		httpTrace, httpParent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
		grpcTrace, grpcParent = "5cf92f3577b34da6a3ce929d0e0e4737", "11f067aa0ba902b8"
	)
	req, _ := http.NewRequest("POST", p.HTTP+"/v1/check", strings.NewReader(`{"policy":"api","key":"`+httpKey+`"}`))
	req.Header.Set("traceparent", "00-"+httpTrace+"-"+httpParent+"-01")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST /v1/check: %d", resp.StatusCode)
	}
	// Unsampled by the caller: nothing of it is exported.
	post(t, p.HTTP+"/v1/check", `{"policy":"api","key":"`+httpKey+`"}`)

	conn, err := grpc.NewClient(p.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(t.Context(), "traceparent", "00-"+grpcTrace+"-"+grpcParent+"-01")
	rr, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge",
		Descriptors: []*commonrl.RateLimitDescriptor{{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "api_key", Value: grpcKey}}}}})
	if err != nil || rr.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit: %v, %v", rr, err)
	}
	// The last export is made on shutdown.
	if code := p.Stop(); code != 0 {
		t.Fatalf("sluice serve exited with %d:\n%s", code, p.Logs())
	}

	spans := recv.spans()
	byTrace := map[string][]span{}
	for _, s := range spans {
		id := fmt.Sprintf("%x", s.TraceId)
		if id != httpTrace && id != grpcTrace {
			t.Errorf("span %q of trace %s: a trace the callers did not sample", s.Name, id)
		}
		byTrace[id] = append(byTrace[id], s)
		if s.resource["service.name"] != "sluice-e2e" || s.resource["deployment.environment"] != "test" || s.resource["team"] != "edge limits" {
			t.Errorf("span %q: resource %v", s.Name, s.resource)
		}
	}
	if len(spans) == 0 {
		t.Fatal("no span received")
	}
	check := func(trace, parent, serverName string) {
		t.Helper()
		var server, decision *span
		commands := 0
		for i, s := range byTrace[trace] {
			switch {
			case s.Kind == tracepb.Span_SPAN_KIND_SERVER:
				server = &byTrace[trace][i]
			case strings.HasPrefix(s.Name, "rate_limit "):
				decision = &byTrace[trace][i]
			case kv(s.Attributes)["db.system"] == "valkey":
				commands++
			}
		}
		if server == nil || decision == nil {
			t.Fatalf("trace %s: no server span or no decision span among %d", trace, len(byTrace[trace]))
		}
		if got := fmt.Sprintf("%x", server.ParentSpanId); got != parent {
			t.Errorf("trace %s: the server span's parent is %s, want the caller's %s", trace, got, parent)
		}
		if server.Name != serverName {
			t.Errorf("trace %s: server span %q, want %q", trace, server.Name, serverName)
		}
		if !bytes.Equal(decision.ParentSpanId, server.SpanId) {
			t.Errorf("trace %s: the decision's span is not the server span's child", trace)
		}
		a := kv(decision.Attributes)
		for k, want := range map[string]string{"rate_limit.policy": "api.token_bucket", "rate_limit.algorithm": "token_bucket",
			"rate_limit.decision": "allowed", "rate_limit.outcome": "allowed", "rate_limit.answered_by": "store",
			"rate_limit.cost": "1", "rate_limit.limit": "20", "rate_limit.retry_after": "0"} {
			if a[k] != want {
				t.Errorf("trace %s: decision span %s = %q, want %q (all: %v)", trace, k, a[k], want, a)
			}
		}
		if a["rate_limit.remaining"] == "" {
			t.Errorf("trace %s: no rate_limit.remaining", trace)
		}
		if commands == 0 {
			t.Errorf("trace %s: no Valkey command span", trace)
		}
	}
	check(httpTrace, httpParent, "POST /v1/check")
	check(grpcTrace, grpcParent, "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")

	pts := recv.metricPoints()
	found := map[string]bool{}
	for _, a := range pts["sluice.decisions"] {
		if a["rate_limit.policy"] == "api.token_bucket" && a["rate_limit.outcome"] == "allowed" && a["service.name (resource)"] == "sluice-e2e" {
			found["decisions"] = true
		}
	}
	for _, a := range pts["sluice.decision.duration"] {
		found["duration"] = found["duration"] || a["rate_limit.policy"] == "api.token_bucket"
	}
	for _, a := range pts["sluice.breaker.state"] {
		found["breaker"] = found["breaker"] || a["rate_limit.store.node"] != "" && a["rate_limit.breaker.state"] == "closed"
	}
	for _, m := range []string{"decisions", "duration", "breaker"} {
		if !found[m] {
			names := []string{}
			for n := range pts {
				names = append(names, n)
			}
			t.Errorf("no %s metric as documented; received %v", m, names)
		}
	}

	recv.mu.Lock()
	defer recv.mu.Unlock()
	for _, b := range recv.raw {
		for _, k := range []string{httpKey, grpcKey} {
			if bytes.Contains(b, []byte(k)) {
				t.Errorf("the key %q appears in clear in an OTLP export", k)
			}
		}
	}
}

// grantPoint is one data point of a grant metric received over OTLP.
type grantPoint struct {
	unit      string
	monotonic bool // a cumulative monotonic sum (a counter)
	value     int64
}

// grantPoints returns the last point received of each grant metric
// (sluice.grant.*, sluice.grants), by "metric policy attribute-value", in
// the metric requests from the from-th on.
func (r *otlpReceiver) grantPoints(from int) map[string]grantPoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]grantPoint{}
	for _, req := range r.metrics[min(from, len(r.metrics)):] {
		for _, rm := range req.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					if m.Name != "sluice.grants" && !strings.HasPrefix(m.Name, "sluice.grant.") {
						continue
					}
					add := func(p *metricspb.NumberDataPoint, monotonic bool) {
						a := kv(p.Attributes)
						k := strings.TrimSpace(m.Name + " " + a["rate_limit.policy"] + " " + a["rate_limit.grant.event"] + a["rate_limit.grant.where"])
						out[k] = grantPoint{unit: m.Unit, monotonic: monotonic, value: p.GetAsInt()}
					}
					switch d := m.Data.(type) {
					case *metricspb.Metric_Sum:
						for _, p := range d.Sum.DataPoints {
							add(p, d.Sum.IsMonotonic && d.Sum.AggregationTemporality == metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE)
						}
					case *metricspb.Metric_Gauge:
						for _, p := range d.Gauge.DataPoints {
							add(p, false)
						}
					}
				}
			}
		}
	}
	return out
}

func (r *otlpReceiver) metricRequests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.metrics)
}

// TestE2EOpenTelemetryGrants: sluice serve exporting metrics over OTLP
// exports the grant metrics of its policies with grants (grants: auto),
// as /metrics's sluice_grant_*: the same counters under the same limiter
// names (rate_limit.policy), with the documented units and attributes;
// none for a policy without grants; and it follows reloads: a policy that
// gains grants is exported from then on, one that loses them no longer.
func TestE2EOpenTelemetryGrants(t *testing.T) {
	vk := valkeytest.Start(t)
	recv := startReceiver(t)
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	const (
		hotGrants  = "policies:\n  - {name: hot, algorithm: gcra, burst: 1000, rate: 200/s, grants: auto}\n  - {name: cold, algorithm: gcra, burst: 1000, rate: 200/s}\n"
		coldGrants = "policies:\n  - {name: hot, algorithm: gcra, burst: 1000, rate: 200/s}\n  - {name: cold, algorithm: gcra, burst: 1000, rate: 200/s, grants: auto}\n"
		hot, cold  = "hot.gcra", "cold.gcra"
	)
	writeFile(t, cfg, hotGrants)
	p := serve(t, []string{
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=http://" + recv.HTTP + "/v1/metrics",
		"OTEL_TRACES_EXPORTER=none",
		"OTEL_METRIC_EXPORT_INTERVAL=200",
	}, "--config", cfg, "--valkey", vk.Addr)
	waitReady(t, p)
	eventually := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after 15s\n%s", what, p.Logs())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	decide := func(policy string, n int) {
		t.Helper()
		for i := range n {
			if code, m := post(t, p.HTTP+"/v1/check", fmt.Sprintf(`{"policy":%q,"key":"k%d"}`, policy, i%2)); code != 200 || m["allowed"] != true {
				t.Fatalf("%s: %d %v", policy, code, m)
			}
		}
	}
	// prom is serve's /metrics sluice_grant_* lines.
	prom := func() string {
		resp, err := client.Get(p.HTTP + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return grepLines(b, "sluice_grant")
	}

	decide("hot", 40)
	var pts map[string]grantPoint
	// Every decision of a policy with grants is local, valkey or failed:
	// wait for an export that counts the 40.
	decided := func(limiter string) int64 {
		return pts["sluice.grant.decisions "+limiter+" local"].value + pts["sluice.grant.decisions "+limiter+" valkey"].value +
			pts["sluice.grant.decisions "+limiter+" failed"].value
	}
	eventually("hot's 40 grant decisions over OTLP", func() bool {
		pts = recv.grantPoints(0)
		return decided(hot) == 40
	})
	want := map[string]string{ // the metrics of a limiter with grants and their units
		"sluice.grant.calls": "{call}", "sluice.grants taken": "{grant}", "sluice.grants renewed": "{grant}",
		"sluice.grant.units granted": "{unit}", "sluice.grant.units returned": "{unit}", "sluice.grant.units expired": "{unit}",
		"sluice.grant.decisions local": "{decision}", "sluice.grant.decisions valkey": "{decision}", "sluice.grant.decisions failed": "{decision}",
		"sluice.grant.mixed": "{call}", "sluice.grant.keys": "{key}",
	}
	for m, unit := range want {
		name, attr, _ := strings.Cut(m, " ")
		k := strings.TrimSpace(name + " " + hot + " " + attr)
		got, ok := pts[k]
		switch {
		case !ok:
			t.Errorf("%s: not exported (got %v)", k, pts)
		case got.unit != unit:
			t.Errorf("%s: unit %q, want %q", k, got.unit, unit)
		case got.monotonic != (name != "sluice.grant.keys"):
			t.Errorf("%s: monotonic cumulative sum %v, want %v", k, got.monotonic, name != "sluice.grant.keys")
		}
	}
	g := func(k string) int64 { return pts[k].value }
	if local, store := g("sluice.grant.decisions "+hot+" local"), g("sluice.grant.decisions "+hot+" valkey"); local == 0 || store == 0 {
		t.Errorf("hot: %d local and %d valkey decisions of 40 (most against the grants; a first decision of a key waits for its grant)", local, store)
	}
	if g("sluice.grant.calls "+hot) == 0 || g("sluice.grants "+hot+" taken") == 0 || g("sluice.grant.units "+hot+" granted") == 0 {
		t.Errorf("hot: no grant call, grant or unit exported: %v", pts)
	}
	if g("sluice.grant.decisions "+hot+" failed") != 0 || g("sluice.grant.mixed "+hot) != 0 {
		t.Errorf("hot: failed or mixed calls on a healthy Valkey: %v", pts)
	}
	for k := range pts {
		if strings.Contains(k, cold) {
			t.Errorf("%s: exported for a policy without grants", k)
		}
	}
	// The same limiters as /metrics, with the same local decisions now
	// that the traffic has stopped (they move only with decisions).
	pm := prom()
	if !strings.Contains(pm, fmt.Sprintf(`sluice_grant_decisions_total{limiter=%q,where="local"} %d`, hot, g("sluice.grant.decisions "+hot+" local"))) {
		t.Errorf("/metrics's local decisions differ from the OTLP export's %d:\n%s", g("sluice.grant.decisions "+hot+" local"), pm)
	}

	// A reload takes hot's grants away and gives cold grants.
	writeFile(t, cfg, coldGrants)
	p.cmd.Process.Signal(syscall.SIGHUP)
	eventually("the reload in /metrics", func() bool {
		pm := prom()
		return strings.Contains(pm, `limiter="`+cold+`"`) && !strings.Contains(pm, `limiter="`+hot+`"`)
	})
	// Each export is collected after the one before it was received: the
	// requests after the next are collected after the reload.
	after := recv.metricRequests() + 1
	decide("cold", 40)
	eventually("cold's 40 grant decisions over OTLP", func() bool {
		pts = recv.grantPoints(after)
		return decided(cold) == 40 && pts["sluice.grant.decisions "+cold+" local"].value > 0
	})
	for k := range pts {
		if strings.Contains(k, hot) {
			t.Errorf("%s: still exported after hot lost its grants", k)
		}
	}

	// hot gets its grants back: its counters go on from its 40 decisions
	// before, over OTLP (whose cumulative sums keep their start time) as
	// on /metrics.
	writeFile(t, cfg, hotGrants)
	p.cmd.Process.Signal(syscall.SIGHUP)
	eventually("the second reload in /metrics", func() bool { return strings.Contains(prom(), `limiter="`+hot+`"`) })
	after = recv.metricRequests() + 1
	decide("hot", 40)
	eventually("hot's 80 grant decisions over OTLP", func() bool {
		pts = recv.grantPoints(after)
		return decided(hot) >= 80
	})
	if decided(hot) != 80 {
		t.Errorf("hot: %d grant decisions over OTLP, want its 40 before losing its grants and 40 after", decided(hot))
	}
	var promDecided int64
	pm = prom()
	for _, where := range []string{"local", "valkey", "failed"} {
		var n int64
		for _, l := range strings.Split(pm, "\n") {
			fmt.Sscanf(l, `sluice_grant_decisions_total{limiter="`+hot+`",where="`+where+`"} %d`, &n)
		}
		promDecided += n
	}
	if promDecided != 80 {
		t.Errorf("/metrics: %d grant decisions of hot, want its 40 before losing its grants and 40 after, as over OTLP:\n%s", promDecided, pm)
	}
	if code := p.Stop(); code != 0 {
		t.Fatalf("sluice serve exited with %d:\n%s", code, p.Logs())
	}
}
