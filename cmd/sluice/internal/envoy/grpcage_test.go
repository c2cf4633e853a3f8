package envoy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestMaxConnectionAge: GRPC_MAX_CONNECTION_AGE (and its grace) close a
// client's connection once that old: a call after it goes over a new
// connection. And the health service's Check follows StoreHealth
// (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION) when it is set.
func TestMaxConnectionAge(t *testing.T) {
	storeDown := atomic.Bool{}
	f := newFake(t, "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: minute, requests_per_unit: 5}}\n")
	s := New(f, prometheus.NewRegistry(), slog.New(slog.DiscardHandler), 1<<10, Options{
		MaxConnectionAge: 300 * time.Millisecond, MaxConnectionAgeGrace: 100 * time.Millisecond,
		StoreHealth: func(context.Context) error {
			if storeDown.Load() {
				return errors.New("down")
			}
			return nil
		}})
	g := s.NewGRPCServer()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(l)
	defer g.Stop()
	var dials atomic.Int32
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	check := func() healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		if err != nil {
			t.Fatal(err)
		}
		return r.Status
	}
	if st := check(); st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("store up: %v", st)
	}
	storeDown.Store(true)
	if st := check(); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("store down: %v", st)
	}
	storeDown.Store(false)
	// Past the age and its grace (and gRPC's jitter of 10%), the first
	// connection is closed: the next call dials again.
	deadline := time.Now().Add(10 * time.Second)
	for dials.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("one connection after 10s with a maximum age of 300ms")
		}
		time.Sleep(200 * time.Millisecond)
		check()
	}
}
