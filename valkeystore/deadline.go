package valkeystore

import (
	"context"
	"sync"

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
	d := doCalls.Get().(*doCall)
	d.ctx, d.c, d.cmd = ctx, c, cmd
	go d.run()
	select {
	case r := <-d.ch:
		// The goroutine is done with d: its send was its last act.
		d.ctx, d.c, d.cmd = nil, nil, valkey.Completed{}
		doCalls.Put(d)
		return r
	case <-ctx.Done():
		return valkey.NewErrorResult(ctx.Err()) // d stays with its goroutine
	}
}

// A doCall is one guarded c.Do: the goroutine's arguments and the channel
// of its reply, reused once the reply was received (two allocations less
// per call than a closure and a channel each time).
type doCall struct {
	ctx context.Context
	c   valkey.Client
	cmd valkey.Completed
	ch  chan valkey.ValkeyResult
}

var doCalls = sync.Pool{New: func() any { return &doCall{ch: make(chan valkey.ValkeyResult, 1)} }}

func (d *doCall) run() { d.ch <- d.c.Do(d.ctx, d.cmd) }

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
