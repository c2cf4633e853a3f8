package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const (
	checkMethod = "/grpc.health.v1.Health/Check"
	watchMethod = "/grpc.health.v1.Health/Watch"
)

// serve runs a gRPC server with the health service behind the interceptors
// on a loopback TCP port, and returns a client of it.
func serve(t *testing.T, cfg grpclimit.Config) healthpb.HealthClient {
	t.Helper()
	in, err := grpclimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return serveWith(t, in)
}

// serveWith is serve with the interceptors of in.
func serveWith(t *testing.T, in *grpclimit.Interceptor) healthpb.HealthClient {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(in.Unary()), grpc.ChainStreamInterceptor(in.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func limiter(t *testing.T, clock *sluicetest.Clock, name string, limit int64, opts ...sluice.Option) *sluice.Limiter {
	t.Helper()
	return limiterOn(t, memstore.New(), clock, name, limit, opts...)
}

func limiterOn(t *testing.T, store driver.Store, clock *sluicetest.Clock, name string, limit int64, opts ...sluice.Option) *sluice.Limiter {
	t.Helper()
	opts = append([]sluice.Option{sluice.WithName(name), sluice.WithClock(clock.Now)}, opts...)
	l, err := sluice.New(store, sluice.FixedWindow{Limit: limit, Window: time.Minute}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func call(c healthpb.HealthClient, md ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func openStream(c healthpb.HealthClient) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	_, err = s.Recv() // the first status, or the interceptor's refusal
	return err
}

// retryInfo returns the RetryInfo delay of a RESOURCE_EXHAUSTED error.
func retryInfo(t *testing.T, err error) (time.Duration, *errdetails.QuotaFailure) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		t.Fatalf("error %v, want RESOURCE_EXHAUSTED", err)
	}
	var delay time.Duration = -1
	var qf *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			delay = d.RetryDelay.AsDuration()
		case *errdetails.QuotaFailure:
			qf = d
		}
	}
	if delay < 0 {
		t.Fatalf("no RetryInfo in %v", st.Details())
	}
	return delay, qf
}

// TestUnaryPeer: the limit by peer address allows the limit, then refuses
// with RESOURCE_EXHAUSTED and RetryInfo equal to the limiter's RetryAfter.
func TestUnaryPeer(t *testing.T) {
	clock := sluicetest.NewClock()
	clock.Advance(15 * time.Second) // 45s left in the minute
	lim := limiter(t, clock, "rpc", 2)
	c := serve(t, grpclimit.Config{Limits: []grpclimit.Limit{{Limiter: lim, Key: grpclimit.PeerAddr()}}})
	for i := 0; i < 2; i++ {
		if err := call(c); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	delay, qf := retryInfo(t, call(c))
	if delay != 45*time.Second {
		t.Errorf("RetryInfo %v, want 45s", delay)
	}
	if qf == nil || len(qf.Violations) != 1 || qf.Violations[0].Subject != lim.Name() {
		t.Errorf("QuotaFailure %v, want one violation of %s", qf, lim.Name())
	}
	// The count is the peer's: the limiter's own view of 127.0.0.1 agrees.
	res, err := lim.Peek(context.Background(), sluice.Identity("ip", "127.0.0.1"))
	if err != nil || res.Allowed {
		t.Errorf("peek ip:127.0.0.1: %+v %v, want exhausted", res, err)
	}
	clock.Advance(45 * time.Second)
	if err := call(c); err != nil {
		t.Errorf("after RetryInfo's delay: %v", err)
	}
}

// TestStream: a stream is decided when it opens.
func TestStream(t *testing.T) {
	clock := sluicetest.NewClock()
	c := serve(t, grpclimit.Config{Limits: []grpclimit.Limit{{Limiter: limiter(t, clock, "rpc", 1), Key: grpclimit.PeerAddr()}}})
	if err := openStream(c); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	delay, _ := retryInfo(t, openStream(c))
	if delay != time.Minute {
		t.Errorf("RetryInfo %v, want 1m", delay)
	}
}

// TestMetadataAndMethod: a key per metadata value (calls without it skip
// it, as said) and a key per method.
func TestMetadataAndMethod(t *testing.T) {
	clock := sluicetest.NewClock()
	c := serve(t, grpclimit.Config{Limits: []grpclimit.Limit{
		{Limiter: limiter(t, clock, "per-key", 1), Key: grpclimit.Metadata("X-API-Key"), Missing: grpclimit.Skip()},
		{Limiter: limiter(t, clock, "per-method", 3), Key: grpclimit.Method(), Methods: []string{checkMethod}},
	}})
	if err := call(c, "x-api-key", "a"); err != nil {
		t.Fatal(err)
	}
	if _, qf := retryInfo(t, call(c, "x-api-key", "a")); qf.Violations[0].Subject != "per-key" {
		t.Errorf("second call with key a refused by %v, want per-key", qf)
	}
	if err := call(c, "x-api-key", "b"); err != nil {
		t.Errorf("key b: %v", err)
	}
	if err := call(c); err != nil { // no key: only per-method applies (3rd unit)
		t.Errorf("without a key: %v", err)
	}
	// per-method is spent (3 allowed: a, b, none; the refused call gave its unit back).
	if _, qf := retryInfo(t, call(c, "x-api-key", "c")); qf.Violations[0].Subject != "per-method" {
		t.Errorf("refused by %v, want per-method", qf)
	}
	// Watch is not in per-method's Methods.
	if err := openStream(c); err != nil {
		t.Errorf("Watch: %v", err)
	}
}

type downStore struct{}

func (*downStore) Do(_ context.Context, batch []driver.Op) error {
	for i := range batch {
		batch[i].Err = errors.New("down")
	}
	return nil
}
func (*downStore) Delete(context.Context, ...string) error { return errors.New("down") }

// TestDegradedAndSkip: a store that cannot decide: fail open lets calls
// through, fail closed refuses them with RESOURCE_EXHAUSTED; Skip exempts.
func TestDegradedAndSkip(t *testing.T) {
	clock := sluicetest.NewClock()
	open := serve(t, grpclimit.Config{Limits: []grpclimit.Limit{{Limiter: limiterOn(t, &downStore{}, clock, "open", 1), Key: grpclimit.PeerAddr()}}})
	for i := 0; i < 3; i++ {
		if err := call(open); err != nil {
			t.Fatalf("fail open: %v", err)
		}
	}
	closed := serve(t, grpclimit.Config{
		Limits: []grpclimit.Limit{{Limiter: limiterOn(t, &downStore{}, clock, "closed", 1, sluice.WithFailMode(sluice.FailClosed)), Key: grpclimit.PeerAddr()}},
		Skip:   func(_ context.Context, m string) bool { return m == watchMethod },
	})
	if delay, _ := retryInfo(t, call(closed)); delay <= 0 {
		t.Errorf("fail closed: RetryInfo %v", delay)
	}
	if err := openStream(closed); err != nil {
		t.Errorf("skipped Watch: %v", err)
	}
}

func TestNewErrors(t *testing.T) {
	lim := limiter(t, sluicetest.NewClock(), "x", 1)
	for _, cfg := range []grpclimit.Config{
		{},
		{Limits: []grpclimit.Limit{{Key: grpclimit.Method()}}},
		{Limits: []grpclimit.Limit{{Limiter: lim}}},
		{Limits: []grpclimit.Limit{{Limiter: lim, Key: grpclimit.Method(), Methods: []string{"Check"}}}},
	} {
		if _, err := grpclimit.New(cfg); !errors.Is(err, grpclimit.ErrInvalidConfig) {
			t.Errorf("New(%+v): %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

// TestMissingKey: a call without the metadata a limit is keyed by is
// refused with INVALID_ARGUMENT by default, counting nothing; FallBack
// counts it by the fallback's key; FallBack(nil) is refused by New.
func TestMissingKey(t *testing.T) {
	clock := sluicetest.NewClock()
	perPeer := limiter(t, clock, "per-peer", 100)
	c := serve(t, grpclimit.Config{Limits: []grpclimit.Limit{
		{Limiter: perPeer, Key: grpclimit.PeerAddr()},
		{Limiter: limiter(t, clock, "per-key", 1), Key: grpclimit.Metadata("x-api-key")},
	}})
	for range 3 {
		if err := call(c); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"per-key"`) {
			t.Fatalf("a call without x-api-key: %v, want INVALID_ARGUMENT naming per-key", err)
		}
	}
	if res, err := perPeer.Peek(context.Background(), "ip:127.0.0.1"); err != nil || res.Remaining != 100 {
		t.Errorf("per-peer after refusals for want of a key: %+v, %v; want 100 remaining", res, err)
	}
	if err := call(c, "x-api-key", "a"); err != nil {
		t.Errorf("a call with a key: %v", err)
	}
	if res, err := perPeer.Peek(context.Background(), "ip:127.0.0.1"); err != nil || res.Remaining != 99 {
		t.Errorf("per-peer after one keyed call: %+v, %v; want 99 remaining (is the key PeerAddr's?)", res, err)
	}

	fb := serve(t, grpclimit.Config{Limits: []grpclimit.Limit{
		{Limiter: limiter(t, clock, "per-key-or-peer", 2), Key: grpclimit.Metadata("x-api-key"), Missing: grpclimit.FallBack(grpclimit.PeerAddr())},
	}})
	for i, ok := range []bool{true, true, false} {
		err := call(fb)
		if ok != (err == nil) || !ok && status.Code(err) != codes.ResourceExhausted {
			t.Errorf("call %d without a key, counted by address: %v", i, err)
		}
	}
	if err := call(fb, "x-api-key", "a"); err != nil {
		t.Errorf("a key from the exhausted address: %v, want allowed (its own count)", err)
	}
	if _, err := grpclimit.New(grpclimit.Config{Limits: []grpclimit.Limit{
		{Limiter: perPeer, Key: grpclimit.Method(), Missing: grpclimit.FallBack(nil)}}}); !errors.Is(err, grpclimit.ErrInvalidConfig) {
		t.Errorf("FallBack(nil): %v, want ErrInvalidConfig", err)
	}
}
