package valkeystore

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valkey-io/valkey-go"
)

// The deadline layer: every call to Valkey returns by its context's
// deadline, whether or not a circuit breaker is configured. It keeps no
// count of anything but its own need, and the breaker relies on it, not
// the other way round.
//
// valkey-go (v1.0.79) returns by the context's deadline on every path a
// call takes on an open connection. Two paths do not:
//   - A call that needs a connection while another call is opening it
//     (valkey-go opens a node's connections on first use, and again after
//     one failed) waits for that call's dial and handshake, which end at
//     that call's deadline (at the dial timeout for valkey-go's own calls,
//     such as a cluster's slot map), and fails with that call's error if
//     they do (classify counts it as saying nothing). Against a
//     server that accepts and never answers, a 50ms call behind a 1s
//     call's handshake returns after a second.
//   - A pipeline of ClientOption.BlockingPipeline commands or more goes on
//     a connection of its own, which valkey-go closes when a call on it
//     fails; closing a connection to a hung server waits up to a second.
//
// Neither happens on a healthy node: its connection is open, and a
// connection ends when a call on it fails, or when the server (or
// something on the way) closes it, or when it was idle long enough for
// valkey-go's background PING to time out (over a second by default). So
// a single command goes straight to valkey-go, on the caller's goroutine,
// when two things hold:
//   - its node is trusted: the node's latest call ended with replies
//     (Valkey's errors are replies), less than trustFor ago, and no call
//     failed since;
//   - its time left is within an eighth of the longest time left of the
//     node's calls begun in the last topFor (see longest): if its
//     connection ends in the instant before the failure is seen, the call
//     of the store that opens the next one ends its handshake by its own
//     deadline, no later than an eighth of the time left past this call's,
//     and a 50ms call never waits behind a 1s call.
//
// Any other call whose context can end (the first calls of a store, the
// calls after a failure or a quiet spell, the shorter calls of a node that
// also serves longer ones, every pipeline of several commands) runs on a
// goroutine of its own and returns when the context ends; the goroutine
// ends when valkey-go returns.
//
// What is left: a call that goes straight to valkey-go returns when its
// context ends wherever valkey-go watches the context, which is always
// once a connection has had two calls in flight at once (valkey-go then
// queues every call on it; AlwaysPipelining does so from the start). A
// lone call on a connection that never had company is written and read
// with the connection's deadline set to the call's: a cancellation before
// the deadline waits for the reply, or the deadline. And a connection
// opened by a call that is not the store's (the application's, on a shared
// client, or valkey-go's own) is waited for only while the node is
// trusted: when the connection ended under no call of the store's, less
// than trustFor after a reply.

// trustFor is how long a reply keeps a node trusted.
const trustFor = 100 * time.Millisecond

// topFor is how long the longest time left of a node's calls is kept
// (see longest).
const topFor = time.Second

// guard is the deadline layer of one node; see above.
type guard struct {
	okAt    atomic.Int64  // mono() when a call last ended with replies; 0 after a failure
	fails   atomic.Uint64 // failed calls so far
	guarded atomic.Int64  // calls run on a goroutine of their own (for tests)
	top     atomic.Int64  // the longest time left of a call begun lately, in ns
	topAt   atomic.Int64  // mono() when top was set or last matched
}

// monoBase makes mono monotonic: time.Since reads the monotonic clock.
var monoBase = time.Now()

// mono returns the time on the monotonic clock, in nanoseconds, never 0.
func mono() int64 { return int64(time.Since(monoBase)) | 1 }

// direct reports whether a call under ctx may go straight to valkey-go:
// its node is trusted and its time left is among the longest of the
// node's calls; and the count of failures, for note.
func (g *guard) direct(ctx context.Context) (bool, uint64) {
	fails := g.fails.Load()
	now := mono()
	left := int64(math.MaxInt64)
	if dl, ok := ctx.Deadline(); ok {
		left = int64(dl.Sub(monoBase)) - now // time.Until(dl), without reading the clock again
	}
	long := g.longest(now, left)
	at := g.okAt.Load()
	return long && at != 0 && now-at < int64(trustFor), fails
}

// longest takes the time left of a call begun at now and reports whether
// it is within an eighth of the longest of the node's calls of the last
// topFor. Only those may go straight to valkey-go: a call that opens a
// connection makes the calls behind it wait until its own deadline, so a
// direct call waits at most an eighth of its time left past its deadline
// behind a call of the store that started before it, where a 50ms call
// behind a 1s call would wait a second.
func (g *guard) longest(now, left int64) bool {
	top, at := g.top.Load(), g.topAt.Load()
	switch {
	case left > top+top/64 || now-at > int64(topFor):
		g.top.Store(left)
		g.topAt.Store(now)
		return true
	case left >= top-top/8:
		if now-at > int64(topFor)/4 {
			g.topAt.Store(now)
		}
		return true
	}
	return false
}

// note takes the outcome of a call begun when fails failures had been
// counted: a failure (no reply: a timeout, a network error) ends the trust;
// replies renew it, unless a call failed meanwhile.
func (g *guard) note(fails uint64, replied bool) {
	if !replied {
		g.fails.Add(1)
		g.okAt.Store(0)
		return
	}
	if g.fails.Load() != fails {
		return
	}
	now := mono()
	if at := g.okAt.Load(); at != 0 && now-at < int64(trustFor)/4 {
		return // fresh enough: no write shared by every caller
	}
	g.okAt.Store(now)
	if g.fails.Load() != fails { // a failure between the check and the store
		g.okAt.Store(0)
	}
}

// replied reports whether every result is a reply.
func replied(rs []valkey.ValkeyResult) bool {
	for _, r := range rs {
		if r.NonValkeyError() != nil {
			return false
		}
	}
	return true
}

// do is c.Do(ctx, cmd), returning by ctx's end.
func (g *guard) do(ctx context.Context, c valkey.Client, cmd valkey.Completed) valkey.ValkeyResult {
	if ctx.Done() == nil {
		return c.Do(ctx, cmd) // cannot end: nothing to return by
	}
	ok, fails := g.direct(ctx)
	if ok {
		r := c.Do(ctx, cmd)
		g.note(fails, r.NonValkeyError() == nil)
		return r
	}
	g.guarded.Add(1)
	d := doCalls.Get().(*doCall)
	d.ctx, d.c, d.cmd = ctx, c, cmd
	go d.run()
	select {
	case r := <-d.ch:
		// The goroutine is done with d: its send was its last act.
		d.ctx, d.c, d.cmd = nil, nil, valkey.Completed{}
		doCalls.Put(d)
		g.note(fails, r.NonValkeyError() == nil)
		return r
	case <-ctx.Done():
		g.note(fails, false)
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
func (g *guard) doMulti(ctx context.Context, c valkey.Client, cmds valkey.Commands) []valkey.ValkeyResult {
	return g.run(ctx, len(cmds), func() []valkey.ValkeyResult { return c.DoMulti(ctx, cmds...) })
}

// run is fn, which returns n replies, returning by ctx's end: always on a
// goroutine of its own when ctx can end (a pipeline of several commands
// may go on a connection of its own; see above).
func (g *guard) run(ctx context.Context, n int, fn func() []valkey.ValkeyResult) []valkey.ValkeyResult {
	if ctx.Done() == nil {
		return fn()
	}
	g.guarded.Add(1)
	_, fails := g.direct(ctx) // counts its time left
	r, err := returnBy(ctx, fn)
	if err == nil {
		g.note(fails, replied(r))
		return r
	}
	g.note(fails, false)
	out := make([]valkey.ValkeyResult, n)
	for i := range out {
		out[i] = valkey.NewErrorResult(err)
	}
	return out
}

// returnBy runs fn on a goroutine of its own and returns its result, or
// ctx's error when ctx ends first (the goroutine then ends when fn
// returns, and its result is dropped). ctx must be able to end.
func returnBy[T any](ctx context.Context, fn func() T) (T, error) {
	ch := make(chan T, 1)
	go func() { ch <- fn() }()
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
