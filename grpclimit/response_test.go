package grpclimit_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestDenyCode: a limit's DenyCode is the status of the calls it refuses;
// among several refusing limits the one refused longest chooses; the
// default stays RESOURCE_EXHAUSTED.
func TestDenyCode(t *testing.T) {
	clock := sluicetest.NewClock()
	store := memstore.New()
	capacity, err := sluice.New(store, sluice.FixedWindow{Limit: 1, Window: time.Hour}, sluice.WithName("capacity"), sluice.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	fair := limiterOn(t, store, clock, "fair", 1)
	c := serve(t, grpclimit.Config{Limits: []grpclimit.Limit{
		{Limiter: fair, Key: grpclimit.PeerAddr(), DenyCode: codes.Aborted},
		{Limiter: capacity, Key: grpclimit.Method(), DenyCode: codes.Unavailable},
	}})
	if err := call(c); err != nil {
		t.Fatal(err)
	}
	// Both refuse: capacity (an hour) outlasts fair (a minute).
	if st, _ := status.FromError(call(c)); st.Code() != codes.Unavailable {
		t.Fatalf("both refuse: %v, want UNAVAILABLE", st)
	}
	clock.Advance(time.Minute) // fair allows again, capacity still refuses
	if st, _ := status.FromError(call(c)); st.Code() != codes.Unavailable {
		t.Fatalf("capacity refuses: %v", st)
	}
	plain := limiter(t, clock, "plain", 1)
	c2 := serve(t, grpclimit.Config{Limits: []grpclimit.Limit{{Limiter: plain, Key: grpclimit.PeerAddr()}}})
	call(c2)
	retryInfo(t, call(c2)) // RESOURCE_EXHAUSTED, with its details
}

// TestDenyCodeRefused: New refuses a code gRPC does not define.
func TestDenyCodeRefused(t *testing.T) {
	l, err := sluice.New(memstore.New(), sluice.FixedWindow{Limit: 1, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	_, err = grpclimit.New(grpclimit.Config{Limits: []grpclimit.Limit{{Limiter: l, Key: grpclimit.Method(), DenyCode: 17}}})
	if !errors.Is(err, grpclimit.ErrInvalidConfig) {
		t.Fatalf("DenyCode 17: %v", err)
	}
}
