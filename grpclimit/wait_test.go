package grpclimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/memstore"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func gcra(t *testing.T, rate float64) *sluice.Limiter {
	t.Helper()
	l, err := sluice.New(memstore.New(), sluice.GCRA{Rate: rate, Per: time.Second, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestWait: a call refused for less than Wait waits and succeeds; one
// refused for longer fails at once; a waiting call whose client cancels
// leaves at once, takes nothing and frees its place; MaxWaitingPerKey
// bounds the waiters of a key.
func TestWait(t *testing.T) {
	fast := gcra(t, 10) // one per 100ms
	in, err := grpclimit.New(grpclimit.Config{Limits: []grpclimit.Limit{{Limiter: fast, Key: grpclimit.Method(), Wait: 5 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	c := serveWith(t, in)
	for i := range 2 {
		if err := call(c); err != nil {
			t.Fatalf("call %d (the second waits about 100ms): %v", i, err)
		}
	}

	slow := gcra(t, 0.1) // one per 10s
	in, err = grpclimit.New(grpclimit.Config{Limits: []grpclimit.Limit{{Limiter: slow, Key: grpclimit.Method(), Wait: time.Minute}}, MaxWaitingPerKey: 1})
	if err != nil {
		t.Fatal(err)
	}
	c = serveWith(t, in)
	if err := call(c); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for in.Waiting() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the call does not wait")
		}
		time.Sleep(time.Millisecond)
	}
	if st, _ := status.FromError(call(c)); st.Code() != codes.ResourceExhausted {
		t.Fatalf("a second waiter for the key: %v, want RESOURCE_EXHAUSTED at once", st)
	}
	key := sluice.Identity("method", checkMethod)
	before, _ := slow.Peek(context.Background(), key)
	cancel()
	if st, _ := status.FromError(<-done); st.Code() != codes.Canceled {
		t.Fatalf("canceled waiter: %v", st)
	}
	for in.Waiting() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("Waiting %d after the client canceled", in.Waiting())
		}
		time.Sleep(time.Millisecond)
	}
	if after, _ := slow.Peek(context.Background(), key); after.RetryAfter > before.RetryAfter {
		t.Fatalf("the canceled waiter took something: %v then %v", before.RetryAfter, after.RetryAfter)
	}

	long := gcra(t, 0.01) // one per 100s
	in, err = grpclimit.New(grpclimit.Config{Limits: []grpclimit.Limit{{Limiter: long, Key: grpclimit.Method(), Wait: time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	c = serveWith(t, in)
	call(c)
	if st, _ := status.FromError(call(c)); st.Code() != codes.ResourceExhausted || in.Waiting() != 0 {
		t.Fatalf("RetryAfter past Wait: %v", st)
	}
}

// TestWaitRefused: New refuses a negative Wait and Wait on CountRejected.
func TestWaitRefused(t *testing.T) {
	cr, err := sluice.New(memstore.New(), sluice.SlidingLog{Limit: 1, Window: time.Minute, CountRejected: true})
	if err != nil {
		t.Fatal(err)
	}
	shadow, err := sluice.New(memstore.New(), sluice.FixedWindow{Limit: 1, Window: time.Minute}, sluice.WithShadow(true))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []grpclimit.Limit{
		{Limiter: gcra(t, 1), Key: grpclimit.Method(), Wait: -1},
		{Limiter: cr, Key: grpclimit.Method(), Wait: time.Second},
		{Limiter: shadow, Key: grpclimit.Method(), Wait: time.Second},
		{Limiter: shadow, Key: grpclimit.Method(), DenyCode: codes.Unavailable},
	} {
		if _, err := grpclimit.New(grpclimit.Config{Limits: []grpclimit.Limit{l}}); !errors.Is(err, grpclimit.ErrInvalidConfig) {
			t.Errorf("%+v: %v", l, err)
		}
	}
}
