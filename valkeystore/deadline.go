package valkeystore

import (
	"context"
	"sync/atomic"

	"github.com/valkey-io/valkey-go"
)

// The deadline layer: every call to Valkey returns by its context's
// deadline, whether or not a circuit breaker is configured. It keeps no
// count of anything but its own need, and the breaker relies on it, not
// the other way round.
//
// valkey-go (v1.0.79) does not always return by the context's deadline:
// when a new connection's handshake times out against a server that
// accepts and never answers (paused, hung, a black hole), closing that
// connection may block for about a second. A connection is made anew only
// after one failed, so while a node's latest call failed, its calls run on
// a goroutine of their own and return when the context ends; the goroutine
// ends when valkey-go returns. Calls to a healthy node go straight to the
// client, without a goroutine.

// guard is the deadline layer of one node.
type guard struct {
	fails atomic.Int32 // consecutive failed calls, capped
}

// guarded reports whether calls under ctx must run on their own goroutine.
func (g *guard) guarded(ctx context.Context) bool {
	return ctx.Done() != nil && g.fails.Load() != 0
}

// note takes the replies of a call made under ctx.
func (g *guard) note(ctx context.Context, resps []valkey.ValkeyResult) {
	switch out, _, _ := outcomeOf(ctx, resps); out {
	case succeeded:
		if g.fails.Load() != 0 {
			g.fails.Store(0)
		}
	case failed:
		if g.fails.Load() < 1<<20 {
			g.fails.Add(1)
		}
	}
}

// do is c.Do(ctx, cmd), returning by ctx's end.
func (g *guard) do(ctx context.Context, c valkey.Client, cmd valkey.Completed) valkey.ValkeyResult {
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
func (g *guard) doMulti(ctx context.Context, c valkey.Client, cmds valkey.Commands) []valkey.ValkeyResult {
	return g.run(ctx, len(cmds), func() []valkey.ValkeyResult { return c.DoMulti(ctx, cmds...) })
}

// run is fn, which returns n replies, returning by ctx's end.
func (g *guard) run(ctx context.Context, n int, fn func() []valkey.ValkeyResult) []valkey.ValkeyResult {
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
