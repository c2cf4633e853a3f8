package envoy

import (
	"context"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
