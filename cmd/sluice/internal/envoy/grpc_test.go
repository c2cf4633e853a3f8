package envoy

import (
	"context"
	"log/slog"
	"testing"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestUnaryInterceptor: the service's interceptor counts every call and its
// latency by method, and answers a handler's panic with Internal instead
// of crashing, the call still counted.
func TestUnaryInterceptor(t *testing.T) {
	// The interceptor asks nothing of the server.
	s := New(nil, prometheus.NewRegistry(), slog.New(slog.DiscardHandler), 0, Options{})
	should := &grpc.UnaryServerInfo{FullMethod: "/" + rlsService + "/ShouldRateLimit"}
	other := &grpc.UnaryServerInfo{FullMethod: "/grpc.health.v1.Health/Check"}
	resp, err := s.unary(t.Context(), "req", should, func(_ context.Context, req any) (any, error) { return req.(string) + "!", nil })
	if resp != "req!" || err != nil {
		t.Fatalf("passed through: %v %v", resp, err)
	}
	resp, err = s.unary(t.Context(), "req", other, func(context.Context, any) (any, error) { panic("boom") })
	if resp != nil || status.Code(err) != codes.Internal {
		t.Fatalf("a panic: got %v %v, want Internal", resp, err)
	}
	e := s.stats
	if n := testutil.ToFloat64(e.totalRequests.WithLabelValues("ShouldRateLimit")); n != 1 {
		t.Errorf("ShouldRateLimit calls counted %v, want 1", n)
	}
	if n := testutil.ToFloat64(e.totalRequests.WithLabelValues("Check")); n != 1 {
		t.Errorf("Check calls counted %v, want 1", n)
	}
	if n := testutil.CollectAndCount(e.responseTime); n != 2 {
		t.Errorf("latency series %d, want 2 (one per method)", n)
	}
}

// registrar keeps the service a RegisterGRPC registers.
type registrar struct {
	desc *grpc.ServiceDesc
	impl any
}

func (r *registrar) RegisterService(desc *grpc.ServiceDesc, impl any) { r.desc, r.impl = desc, impl }

// TestGRPCCallAllocations: a usual ShouldRateLimit (one descriptor of one
// entry, decided in the memory store) costs sluice's side of gRPC, from
// the request's bytes to its answer's, at most 8 allocations: the request
// with its descriptor in one block and one copy of its bytes for its
// strings (2), the answer (1), the answer's encoding (1), and the
// decision's on the memory store (4: its op, results, key and identity).
// gRPC's own (the stream, its context, its frames) are not counted.
func TestGRPCCallAllocations(t *testing.T) {
	f := newFake(t, "domains:\n  - domain: edge\n    descriptors:\n      - {key: k, rate_limit: {unit: second, requests_per_unit: 1000000000}}\n")
	s := New(f, prometheus.NewRegistry(), slog.New(slog.DiscardHandler), 1<<10, Options{})
	var r registrar
	s.RegisterGRPC(&r)
	codec := lenientCodec{encoding.GetCodecV2(protoenc.Name)}
	in, _ := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{{
		Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "k", Value: "10.0.0.1"}}}}})
	data := mem.BufferSlice{mem.SliceBuffer(in)}
	dec := func(v any) error { return codec.Unmarshal(data, v) }
	ctx, ic := t.Context(), s.unary // gRPC holds the interceptor as one value
	call := func() {
		resp, err := r.desc.Methods[0].Handler(r.impl, ctx, dec, ic)
		if err != nil || resp.(*rlsv3.RateLimitResponse).OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("%v %v", resp, err)
		}
		out, err := codec.Marshal(resp)
		if err != nil || out.Len() == 0 {
			t.Fatalf("encoding: %v", err)
		}
		out.Free()
	}
	call()
	allocs := testing.AllocsPerRun(200, call)
	t.Logf("%.0f allocations per call", allocs)
	if allocs > 8 {
		t.Errorf("ShouldRateLimit over gRPC: %.0f allocations per call, want at most 8", allocs)
	}
}
