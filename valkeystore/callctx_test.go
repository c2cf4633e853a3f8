package valkeystore

import (
	"context"
	"errors"
	"testing"
	"time"
)

type ctxKey struct{}

// TestCallCtx: a call's context ends at its deadline, also when reused
// after a call that ended in time; one that expired is never reused; a
// parent that can end, or ends first, is honoured as context.WithDeadline
// would.
func TestCallCtx(t *testing.T) {
	parent := context.WithValue(context.Background(), ctxKey{}, "v")

	// A call that ends in time leaves its context for the next.
	dl := time.Now().Add(time.Hour)
	ctx, end := withDeadline(parent, dl)
	if _, ok := ctx.(*callCtx); !ok {
		t.Fatalf("context of a call under a parent that never ends: %T, want *callCtx", ctx)
	}
	if d, ok := ctx.Deadline(); !ok || !d.Equal(dl) {
		t.Fatalf("Deadline() = %v, %v; want %v", d, ok, dl)
	}
	if ctx.Value(ctxKey{}) != "v" || ctx.Err() != nil {
		t.Fatalf("Value %v, Err %v; want the parent's value, no error", ctx.Value(ctxKey{}), ctx.Err())
	}
	end.end()

	// The next call (maybe with the same context) ends at its own deadline.
	for i := range 3 {
		dl := time.Now().Add(20 * time.Millisecond)
		ctx, end := withDeadline(parent, dl)
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("call %d: not done 10s after a deadline 20ms away", i)
		}
		if time.Now().Before(dl) {
			t.Fatalf("call %d: done before its deadline", i)
		}
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatalf("call %d: Err() = %v after the deadline", i, ctx.Err())
		}
		end.end()
		// An expired context is closed for good: never handed out again.
		for range 10 {
			next, e := withDeadline(parent, time.Now().Add(time.Hour))
			if next == ctx || next.Err() != nil {
				t.Fatalf("call %d: an expired context reused (Err %v)", i, next.Err())
			}
			e.end()
		}
	}

	// A parent that can be canceled: its cancellation ends the call.
	cp, cancel := context.WithCancel(parent)
	ctx, end = withDeadline(cp, time.Now().Add(time.Hour))
	cancel()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the parent's cancellation did not end the call")
	}
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("Err() = %v after the parent's cancellation", ctx.Err())
	}
	end.end()

	// A parent that ends first bounds the call by itself.
	early, cancel := context.WithDeadline(parent, time.Now().Add(time.Minute))
	defer cancel()
	if ctx, end := withDeadline(early, time.Now().Add(time.Hour)); ctx != early {
		t.Fatalf("a parent ending before the call's deadline: got %T, want the parent", ctx)
	} else {
		end.end()
	}

	// A deadline already passed: the context is done from the start.
	ctx, end = withDeadline(parent, time.Now().Add(-time.Millisecond))
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("a passed deadline: Err() = %v", ctx.Err())
	}
	end.end()
}

// TestCallCtxReused: calls that end in time reuse their contexts (no
// allocation), where context.WithDeadline makes several for each.
func TestCallCtxReused(t *testing.T) {
	seen := map[context.Context]bool{}
	reused := 0
	const calls = 200
	for range calls {
		ctx, end := withDeadline(context.Background(), time.Now().Add(time.Hour))
		if seen[ctx] {
			reused++
		}
		seen[ctx] = true
		end.end()
	}
	// sync.Pool may drop an item at a GC, and drops a quarter of them
	// under the race detector.
	if reused < calls/2 {
		t.Fatalf("%d of %d calls reused a context, want most", reused, calls)
	}
}
