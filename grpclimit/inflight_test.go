package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/memstore"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func waitFree(t *testing.T, l *sluice.Limiter, free bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := l.Peek(context.Background(), "all")
		if err == nil && res.Allowed == free {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("key free %v, want %v (%v)", res.Allowed, free, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestInFlight: an in-flight limit of 1 holds a lease for a unary call
// until it returns and for a stream until it ends; a stream whose lease
// is lost (its key reset) is canceled.
func TestInFlight(t *testing.T) {
	l, err := sluice.New(memstore.New(), sluice.InFlight{Limit: 1, Lease: 300 * time.Millisecond}, sluice.WithName("streams"))
	if err != nil {
		t.Fatal(err)
	}
	c := serve(t, grpclimit.Config{Limits: []grpclimit.Limit{
		{Limiter: l, Key: func(context.Context, string) string { return "all" }},
	}})
	for range 2 {
		if err := call(c); err != nil {
			t.Fatalf("a unary call with the slot free: %v", err)
		}
	}
	waitFree(t, l, true)
	ctx, cancel := context.WithCancel(context.Background())
	w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // past the Lease: the stream's lease is renewed
	if err := call(c); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a unary call while a stream holds the slot: %v, want RESOURCE_EXHAUSTED", err)
	}
	cancel()
	waitFree(t, l, true)
	// A lost lease ends the stream.
	w, err = c.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	if err := l.Reset(context.Background(), "all"); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := w.Recv(); errc <- err }()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("the stream went on after its lease was lost")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream was not ended when its lease was lost")
	}
}

// TestInFlightWait: a call an in-flight limit refuses, with Wait, waits
// for a slot to be freed (a release, long before RetryAfter, the end of
// the current lease at the latest) and succeeds; when no slot is freed
// within Wait it fails once Wait has passed, not at once.
func TestInFlightWait(t *testing.T) {
	l, err := sluice.New(memstore.New(), sluice.InFlight{Limit: 1, Lease: time.Minute}, sluice.WithName("streams"))
	if err != nil {
		t.Fatal(err)
	}
	key := func(context.Context, string) string { return "all" }
	c := serve(t, grpclimit.Config{Limits: []grpclimit.Limit{{Limiter: l, Key: key, Wait: 2 * time.Second}}})
	ctx, cancel := context.WithCancel(context.Background())
	w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	start := time.Now()
	if err := call(c); err != nil {
		t.Fatalf("a call waiting for the slot: %v, want success once the stream ended", err)
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Errorf("admitted after %v: the slot was freed after about 100ms", took)
	}
	waitFree(t, l, true)

	// The slot held for good: fails once Wait has passed.
	c = serve(t, grpclimit.Config{Limits: []grpclimit.Limit{{Limiter: l, Key: key, Wait: 200 * time.Millisecond}}})
	ls, _, err := l.Acquire(context.Background(), "all")
	if err != nil || ls == nil {
		t.Fatalf("Acquire: %v %v", ls, err)
	}
	defer ls.Release(context.Background())
	start = time.Now()
	if err := call(c); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a call while the slot stays held: %v, want RESOURCE_EXHAUSTED", err)
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Errorf("refused after %v, want after Wait (200ms): a release might have freed a slot meanwhile", took)
	}
}
