package server

import (
	"net"
	"strings"
	"testing"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/envoy"
	"github.com/sluicehq/sluice/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// startEnvoy serves yaml over real gRPC with opts and returns the server
// and a client.
func startEnvoy(t *testing.T, yaml string, opts envoy.Options) (*Server, rlsv3.RateLimitServiceClient, *grpc.ClientConn) {
	t.Helper()
	cfg, err := config.Parse("envoy.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, Options{Store: memstore.New(), Logger: quietLogger(), Envoy: opts})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := s.NewGRPCServer()
	go g.Serve(l)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return s, rlsv3.NewRateLimitServiceClient(conn), conn
}

// TestOverrideCacheLRU: past its bound the least recently used override
// limiter is evicted, new overrides keep being answered, and the metrics
// say so.
func TestOverrideCacheLRU(t *testing.T) {
	s, c, _ := startEnvoy(t, "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: hour, requests_per_unit: 5}}\n", envoy.Options{MaxOverrides: 3})
	ask := func(rpu uint32) *rlsv3.RateLimitResponse {
		t.Helper()
		d := desc("k", "v")
		d.Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: typev3.RateLimitUnit_HOUR}
		r, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonrl.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatalf("override %d: %v", rpu, err)
		}
		return r
	}
	for rpu := uint32(100); rpu < 120; rpu++ {
		if r := ask(rpu); r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != rpu {
			t.Fatalf("override %d: %v", rpu, r)
		}
	}
	st := s.state.Load()
	if n := st.overrides.len(); n != 3 {
		t.Errorf("%d limiters cached, want 3", n)
	}
	if v := testutil.ToFloat64(s.metrics.overrideEvictions); v != 17 {
		t.Errorf("evictions %v, want 17", v)
	}
	if v := testutil.ToFloat64(s.metrics.overrides); v != 3 {
		t.Errorf("gauge %v, want 3", v)
	}
	// The counts live in the store: 20 hits so far under one key and window.
	if r := ask(25); r.Statuses[0].LimitRemaining != 4 {
		t.Errorf("after eviction: %v", r)
	}
}

// rawCodec sends bytes as they are, to put malformed messages on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { *(v.(*[]byte)) = data; return nil }
func (rawCodec) Name() string                       { return "proto" }

var _ encoding.Codec = rawCodec{}

// TestMalformedRequest: a request that does not decode is INVALID_ARGUMENT,
// not INTERNAL, and counted as a service error.
func TestMalformedRequest(t *testing.T) {
	s, _, conn := startEnvoy(t, "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: hour, requests_per_unit: 5}}\n", envoy.Options{})
	good, _ := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonrl.RateLimitDescriptor{desc("k", "v")}})
	bad, _ := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonrl.RateLimitDescriptor{desc("k", "vX")}})
	i := strings.LastIndex(string(bad), "vX")
	bad[i+1] = 0xff // not UTF-8
	for name, msg := range map[string][]byte{"not utf-8": bad, "truncated": good[:len(good)-3]} {
		var out []byte
		err := conn.Invoke(t.Context(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", msg, &out, grpc.ForceCodec(rawCodec{}))
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v", name, err)
		}
	}
	if v := metricValue(t, s.Registry(), "ratelimit_service_should_rate_limit_error", "err_type", "service_error"); v != 2 {
		t.Errorf("service_error %v, want 2", v)
	}
	var out []byte
	if err := conn.Invoke(t.Context(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", good, &out, grpc.ForceCodec(rawCodec{})); err != nil {
		t.Errorf("good message: %v", err)
	}
}

// TestMaxDescriptors: the bound is configurable, and within it nothing
// fails the call.
func TestMaxDescriptors(t *testing.T) {
	_, c, _ := startEnvoy(t, "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: hour, requests_per_unit: 500}}\n", envoy.Options{MaxDescriptors: 100})
	many := func(n int) []*commonrl.RateLimitDescriptor {
		out := make([]*commonrl.RateLimitDescriptor, n)
		for i := range out {
			out[i] = desc("k", "v", "deeper", "x", "and", "more") // deeper than the tree: unmatched
		}
		out[0] = desc("k", "v")
		return out
	}
	r, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: many(100)})
	if err != nil || len(r.Statuses) != 100 || r.Statuses[0].LimitRemaining != 499 {
		t.Fatalf("100 descriptors: %v %v", r, err)
	}
	if _, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: many(101)}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("101 descriptors: %v", err)
	}
}

// TestEnvoyMetrics: the ratelimit_service_rate_limit_* family, labelled by
// domain and configured keys, near_limit past the ratio, shadow_mode.
func TestEnvoyMetrics(t *testing.T) {
	s, c, _ := startEnvoy(t, `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10}
    descriptors:
      - {key: path, value: "/a/*", rate_limit: {unit: hour, requests_per_unit: 2}}
  - {key: s, shadow_mode: true, rate_limit: {unit: hour, requests_per_unit: 1}}
  - {key: detail, detailed_metric: true, rate_limit: {unit: hour, requests_per_unit: 1}}
`, envoy.Options{NearLimitRatio: 0.5, MaxMetricSeries: 2})
	ask := func(ds ...*commonrl.RateLimitDescriptor) {
		t.Helper()
		if _, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: ds}); err != nil {
			t.Fatal(err)
		}
	}
	for range 7 {
		ask(desc("k", "v1"))
	}
	for range 3 {
		ask(desc("k", "v1", "path", "/a/b"), desc("s", "x"))
	}
	for _, v := range []string{"a", "b", "c"} {
		ask(desc("detail", v))
	}
	check := func(name string, want float64, metric string, labels ...string) {
		t.Helper()
		if got := metricValue(t, s.Registry(), "ratelimit_service_"+metric, labels...); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	key := func(k1, k2 string) []string { return []string{"domain", "d", "key1", k1, "key2", k2} }
	check("total_hits k", 7, "rate_limit_total_hits", key("k", "")...)
	check("within k", 7, "rate_limit_within_limit", key("k", "")...)
	// Counts 6 and 7 of 10 are past 5 (ratio 0.5): near.
	check("near k", 2, "rate_limit_near_limit", key("k", "")...)
	check("total k/path", 3, "rate_limit_total_hits", key("k", "path_/a/*")...)
	check("over k/path", 1, "rate_limit_over_limit", key("k", "path_/a/*")...)
	check("over s", 2, "rate_limit_over_limit", key("s", "")...)
	check("shadow s", 2, "rate_limit_shadow_mode", key("s", "")...)
	// detailed_metric: one series per value, capped at 2; the third goes to _other.
	check("detail a", 1, "rate_limit_total_hits", key("detail_a", "")...)
	check("detail b", 1, "rate_limit_total_hits", key("detail_b", "")...)
	check("detail other", 1, "rate_limit_total_hits", key("_other", "")...)
	check("config loads", 1, "config_load_success")
}

// TestAllOrNothingRemaining: under counting: all_or_nothing, a refused call
// takes nothing, and the allowing descriptors report what remains after
// the give-back.
func TestAllOrNothingRemaining(t *testing.T) {
	_, c, _ := startEnvoy(t, `
domain: d
counting: all_or_nothing
descriptors:
  - {key: wide, rate_limit: {unit: hour, requests_per_unit: 5}}
  - {key: narrow, rate_limit: {unit: hour, requests_per_unit: 1}}
`, envoy.Options{})
	ask := func() *rlsv3.RateLimitResponse {
		r, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonrl.RateLimitDescriptor{desc("wide", "w"), desc("narrow", "n")}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := ask(); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 4 {
		t.Fatalf("first: %v", r)
	}
	for i := range 3 {
		r := ask()
		if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].Code != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 4 {
			t.Fatalf("refused call %d: %v", i, r)
		}
	}
}

// TestStopIncrementWhenOverLimit: with the option, when one descriptor of
// a call would go over, the others do not count the call's hits; without
// it, they do.
func TestStopIncrementWhenOverLimit(t *testing.T) {
	y := `
domain: d
descriptors:
  - {key: wide, rate_limit: {unit: hour, requests_per_unit: 5}}
  - {key: narrow, rate_limit: {unit: hour, requests_per_unit: 1}}
  - {key: zero, rate_limit: {unit: hour, requests_per_unit: 0}}
`
	for _, stop := range []bool{false, true} {
		_, c, _ := startEnvoy(t, y, envoy.Options{StopIncrementWhenOverLimit: stop})
		var last *rlsv3.RateLimitResponse
		for range 3 {
			r, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonrl.RateLimitDescriptor{desc("wide", "w"), desc("narrow", "n")}})
			if err != nil {
				t.Fatal(err)
			}
			last = r
		}
		want := uint32(2) // 3 calls counted
		if stop {
			want = 4 // only the first call counted on wide
		}
		if last.Statuses[0].LimitRemaining != want || last.Statuses[1].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("stop=%v: %v", stop, last)
		}
		// A requests_per_unit: 0 descriptor is over with any hit: the
		// others do not count beside it.
		r, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonrl.RateLimitDescriptor{desc("wide", "x"), desc("zero", "z")}})
		if err != nil {
			t.Fatal(err)
		}
		want = 4
		if stop {
			want = 5
		}
		if r.Statuses[0].LimitRemaining != want || r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("stop=%v, beside a zero limit: %v", stop, r)
		}
	}
}

// TestReflection: gRPC server reflection lists the rate-limit service.
func TestReflection(t *testing.T) {
	_, _, conn := startEnvoy(t, "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: hour, requests_per_unit: 5}}\n", envoy.Options{})
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !strings.Contains(strings.Join(names, " "), "envoy.service.ratelimit.v3.RateLimitService") {
		t.Errorf("services: %v", names)
	}
	// And the file describing it resolves.
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "envoy.service.ratelimit.v3.RateLimitService"}}); err != nil {
		t.Fatal(err)
	}
	if resp, err = stream.Recv(); err != nil || resp.GetFileDescriptorResponse() == nil {
		t.Errorf("file for the service: %v %v", resp, err)
	}
}

// FuzzShouldRateLimit: any request that decodes is answered without a
// panic, with one status per descriptor, or refused as bad input.
func FuzzShouldRateLimit(f *testing.F) {
	cfg, err := config.Parse("fuzz.yaml", []byte(`
domain: d
descriptors:
  - key: k
    value: "a*b*"
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 3}
    descriptors:
      - {key: n, rate_limit: {unit: second, requests_per_unit: 0}}
  - {key: u, rate_limit: {unlimited: true}}
  - {key: q, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: 1, name: q, replaces: [{name: x}]}}
  - {key: x, rate_limit: {unit: minute, requests_per_unit: 1, name: x}}
`))
	if err != nil {
		f.Fatal(err)
	}
	s, err := New(cfg, Options{Store: memstore.New(), Logger: quietLogger(), Envoy: envoy.Options{MaxOverrides: 4, ResponseDynamicMetadata: true}})
	if err != nil {
		f.Fatal(err)
	}
	seed := func(r *rlsv3.RateLimitRequest) {
		b, _ := proto.Marshal(r)
		f.Add(b)
	}
	seed(&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonrl.RateLimitDescriptor{desc("k", "axb", "n", "1"), desc("q", "1"), desc("x", "2")}})
	d := desc("u", "1")
	d.Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_MONTH}
	seed(&rlsv3.RateLimitRequest{Domain: "d", HitsAddend: 7, Descriptors: []*commonrl.RateLimitDescriptor{d, {IsNegativeHits: true, Entries: desc("k", "ab").Entries}}})
	f.Fuzz(func(t *testing.T, data []byte) {
		var req rlsv3.RateLimitRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		resp, err := s.envoy.Decide(t.Context(), &req)
		if err != nil {
			if c := status.Code(err); c != codes.InvalidArgument {
				t.Fatalf("%v: %v", c, err)
			}
			return
		}
		if len(resp.Statuses) != len(req.GetDescriptors()) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.GetDescriptors()))
		}
	})
}

// TestEnvoyStoreDown: when the store fails, each limit's on_failure
// decides (allow, for envoyproxy/ratelimit's format), and the call is
// answered, not failed.
func TestEnvoyStoreDown(t *testing.T) {
	cfg, err := config.Parse("envoy.yaml", []byte("domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: hour, requests_per_unit: 1}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, Options{Store: &downStore{}, Logger: quietLogger()}) // forwardauth_test.go
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r, err := s.envoy.Decide(t.Context(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonrl.RateLimitDescriptor{desc("k", "v")}})
		if err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("%v %v", r, err)
		}
	}
}

// TestManyDescriptorsAsAlone: a call of more descriptors than decide's
// stack buffers, of every depth and kind (nested, middle wildcard with
// share_threshold, unlimited, requests_per_unit 0, unmatched), answers each
// descriptor as a call of that descriptor alone does.
func TestManyDescriptorsAsAlone(t *testing.T) {
	const yaml = `domain: d
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 3}
    descriptors:
      - key: b
        value: x
        rate_limit: {unit: minute, requests_per_unit: 7, name: ab}
        descriptors:
          - {key: c, rate_limit: {unit: day, requests_per_unit: 9}}
  - {key: path, value: "/v1/*/act", share_threshold: true, rate_limit: {unit: hour, requests_per_unit: 2}}
  - {key: free, rate_limit: {unlimited: true}}
  - {key: none, rate_limit: {unit: hour, requests_per_unit: 0}}
`
	call := func(s *Server, ds ...*commonrl.RateLimitDescriptor) []*rlsv3.RateLimitResponse_DescriptorStatus {
		t.Helper()
		resp, err := s.envoy.Decide(t.Context(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: ds})
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range resp.Statuses {
			if st.CurrentLimit != nil && st.DurationUntilReset == nil {
				t.Fatalf("no duration_until_reset in %v", st)
			}
			st.DurationUntilReset = nil // the clock's, not the decision's
		}
		return resp.Statuses
	}
	newServer := func() *Server {
		cfg, err := config.Parse("envoy.yaml", []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(cfg, Options{Store: memstore.New(), Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	descs := func() []*commonrl.RateLimitDescriptor {
		return []*commonrl.RateLimitDescriptor{
			desc("a", "1", "b", "x", "c", "z"), desc("path", "/v1/u1/act"), desc("a", "2"), desc("free", "f"),
			desc("nothing", "n"), desc("a", "3", "b", "x"), desc("none", "n"), desc("a", "1", "b", "y"),
			desc("path", "/v1/u2/act"), desc("a", "4", "b", "x", "c", "z", "d", "deep"),
		}
	}
	together, alone := newServer(), newServer()
	for round := range 4 {
		got := call(together, descs()...)
		for i, d := range descs() {
			want := call(alone, d)[0]
			if !proto.Equal(got[i], want) {
				t.Errorf("round %d, descriptor %d: together %v, alone %v", round, i, got[i], want)
			}
		}
	}
}

// metricValue is the value of the series of metric name in reg whose
// labels are the given name, value pairs (an empty value: the label is
// empty or absent); 0 when there is none.
func metricValue(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}
