package valkeystore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A script call is bounded by the earliest deadline of its decisions, so
// every call needs a context with that deadline. context.WithDeadline makes
// five allocations and a timer each time; a callCtx is reused from call to
// call (its timer reset, its done channel kept) for as long as it never
// expires, which is nearly always.
//
// It stands in only for a parent that can never end and has no deadline
// (context.Background, as the batcher's merged calls have, or a caller's
// context without a deadline or cancellation); any other parent gets
// context.WithDeadline, whose cancellation follows the parent's.
//
// Reuse is safe because nothing keeps a call's context after the call
// returns, unless the context ended: valkey-go keeps it only while a call
// waits, and the deadline layer's goroutine (deadline.go) outlives a call
// only when its context ended. A callCtx that ended, or whose timer may be
// firing, is never reused.
type callCtx struct {
	parent context.Context
	dl     time.Time
	done   chan struct{}
	timer  *time.Timer
	fired  atomic.Bool
}

var callCtxPool sync.Pool // of *callCtx

func (c *callCtx) Deadline() (time.Time, bool) { return c.dl, true }
func (c *callCtx) Done() <-chan struct{}       { return c.done }
func (c *callCtx) Value(key any) any           { return c.parent.Value(key) }

func (c *callCtx) Err() error {
	if c.fired.Load() {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *callCtx) fire() {
	c.fired.Store(true)
	close(c.done)
}

// withDeadline returns parent bounded by dl (not zero), and what ends its
// use when the call is over (after which the context must not be used).
func withDeadline(parent context.Context, dl time.Time) (context.Context, callEnd) {
	if d, ok := parent.Deadline(); ok && !d.After(dl) {
		return parent, callEnd{} // the parent already ends by dl
	}
	left := time.Until(dl)
	if left <= 0 || parent.Done() != nil {
		ctx, cancel := context.WithDeadline(parent, dl)
		return ctx, callEnd{cancel: cancel}
	}
	c, _ := callCtxPool.Get().(*callCtx)
	if c == nil {
		c = &callCtx{done: make(chan struct{})}
		c.timer = time.AfterFunc(left, c.fire)
	} else {
		c.timer.Reset(left)
	}
	c.parent, c.dl = parent, dl
	return c, callEnd{c: c}
}

// callEnd ends the use of a call's context: a callCtx is reused unless its
// timer fired or is firing; a context.WithDeadline is canceled.
type callEnd struct {
	c      *callCtx
	cancel context.CancelFunc
}

func (e callEnd) end() {
	if e.cancel != nil {
		e.cancel()
	}
	if c := e.c; c != nil && c.timer.Stop() {
		c.parent = nil
		callCtxPool.Put(c)
	}
}
