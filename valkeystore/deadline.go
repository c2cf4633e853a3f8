package valkeystore

import (
	"context"

	"github.com/valkey-io/valkey-go"
)

// The deadline layer: every call to Valkey returns by its context's
// deadline, whether or not a circuit breaker is configured. It keeps no
// count of anything but its own need, and the breaker relies on it, not
// the other way round.
//
// valkey-go (v1.0.79) does not always return by the context's deadline:
// when a connection fails against a server that accepts and never answers
// (paused, hung, a black hole), closing it, or timing out a new
// connection's handshake, may block for about a second. That can happen on
// the very first call after a healthy stretch, before anything has failed,
// so every call whose context can end runs on a goroutine of its own and
// returns when the context ends; the goroutine ends when valkey-go
// returns. The cost is one goroutine per script call (a merged call carries
// many decisions), small beside a round trip, and it buys the guarantee.

// guard is the deadline layer of one node. It keeps no state: it is a
// type of its own so that the layer has one name and one place.
type guard struct{}

// guarded reports whether calls under ctx must run on their own goroutine:
// every call whose context can end.
func (guard) guarded(ctx context.Context) bool {
	return ctx.Done() != nil
}

// do is c.Do(ctx, cmd), returning by ctx's end.
func (g guard) do(ctx context.Context, c valkey.Client, cmd valkey.Completed) valkey.ValkeyResult {
	if !g.guarded(ctx) {
		return c.Do(ctx, cmd)
	}
	ch := make(chan valkey.ValkeyResult, 1)
	go func() { ch <- c.Do(ctx, cmd) }()
	select {
	case r := <-ch:
		return r
	case <-ctx.Done():
		return valkey.NewErrorResult(ctx.Err())
	}
}

// doMulti is c.DoMulti(ctx, cmds...), returning by ctx's end.
func (g guard) doMulti(ctx context.Context, c valkey.Client, cmds valkey.Commands) []valkey.ValkeyResult {
	return g.run(ctx, len(cmds), func() []valkey.ValkeyResult { return c.DoMulti(ctx, cmds...) })
}

// run is fn, which returns n replies, returning by ctx's end.
func (g guard) run(ctx context.Context, n int, fn func() []valkey.ValkeyResult) []valkey.ValkeyResult {
	if !g.guarded(ctx) {
		return fn()
	}
	ch := make(chan []valkey.ValkeyResult, 1)
	go func() { ch <- fn() }()
	select {
	case r := <-ch:
		return r
	case <-ctx.Done():
		out := make([]valkey.ValkeyResult, n)
		for i := range out {
			out[i] = valkey.NewErrorResult(ctx.Err())
		}
		return out
	}
}
