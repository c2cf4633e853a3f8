package valkeystore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/valkey-io/valkey-go"
)

// Durability. Valkey replicates asynchronously: a primary that dies before
// its replica received its latest writes takes them along, and the replica
// promoted in its place answers with counts from a moment earlier. Every
// admission made in that window is given again (a rollback of at most the
// replication lag's worth of decisions, per key).
//
// WithReplicaAck closes that window for the decisions that are allowed:
// each script call is followed, on the same connection, by WAIT for
// replicas within the call's deadline, and a call that fewer replicas
// acknowledged in time fails with ErrNotReplicated, so its decisions
// follow their limiter's fail mode.

// ErrNotReplicated is the error of a decision whose script ran on the
// primary but that fewer replicas than WithReplicaAck asks acknowledged
// within its deadline: a failover now could lose its count. It wraps
// sluice.ErrStoreUnavailable.
var ErrNotReplicated error = errNotReplicated{}

type errNotReplicated struct{}

func (errNotReplicated) Error() string {
	return "valkeystore: not acknowledged by enough replicas in time"
}
func (errNotReplicated) Unwrap() error { return sluice.ErrStoreUnavailable }

// WithReplicaAck makes every script call wait until n replicas have
// acknowledged its writes (WAIT n), within the call's deadline (off by
// default: n = 0). A decision that is not acknowledged in time fails with
// ErrNotReplicated and is decided by its limiter's fail mode, though the
// primary counted it: with FailClosed, what was allowed survives the
// primary's death. It costs a round trip to the replica per call and a
// connection of its own (WAIT blocks the connection it is sent on), so
// calls are no longer pipelined with other callers': measure before
// turning it on.
func WithReplicaAck(n int) Option {
	return optionFunc(func(e *engine) { e.replicaAck = n })
}

// durable sends cmd then WAIT on a dedicated connection, and returns the
// script's reply, or ErrNotReplicated when fewer than e.replicaAck
// replicas acknowledged it before ctx's deadline.
func (e *engine) durable(ctx context.Context, cmd valkey.Completed) valkey.ValkeyResult {
	ms := int64(1000)
	if dl, ok := ctx.Deadline(); ok {
		ms = max(int64(time.Until(dl)/time.Millisecond), 1) // WAIT 0 would wait forever
	}
	wait := e.client.B().Wait().Numreplicas(int64(e.replicaAck)).Timeout(ms).Build()
	var resps []valkey.ValkeyResult
	err := e.client.Dedicated(func(d valkey.DedicatedClient) error {
		resps = d.DoMulti(ctx, cmd, wait)
		return nil
	})
	if err != nil {
		return valkey.NewErrorResult(err)
	}
	if len(resps) != 2 || resps[0].Error() != nil {
		return resps[0]
	}
	acks, err := resps[1].AsInt64()
	if err != nil {
		return valkey.NewErrorResult(fmt.Errorf("valkeystore: WAIT: %w", err))
	}
	if acks < int64(e.replicaAck) {
		return valkey.NewErrorResult(fmt.Errorf("%w: %d of %d replicas", ErrNotReplicated, acks, e.replicaAck))
	}
	return resps[0]
}

// roundDurable is round with WithReplicaAck: each call on a connection of
// its own, concurrently.
func (n *node) roundDurable(ctx context.Context, batch []driver.Op, calls []call, resps []valkey.ValkeyResult, only []int, sha bool) {
	e := n.e
	if only == nil {
		only = make([]int, len(calls))
		for i := range only {
			only[i] = i
		}
	}
	// Built here, so that the goroutines hold neither batch nor calls.
	cmds := make(valkey.Commands, len(only))
	for j, i := range only {
		cmds[j] = e.command(batch, calls[i], sha)
	}
	out := n.guard.run(ctx, len(only), func() []valkey.ValkeyResult {
		out := make([]valkey.ValkeyResult, len(cmds))
		var wg sync.WaitGroup
		for j, cmd := range cmds {
			if j == len(cmds)-1 {
				out[j] = e.durable(ctx, cmd)
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				out[j] = e.durable(ctx, cmd)
			}()
		}
		wg.Wait()
		return out
	})
	for j, i := range only {
		resps[i] = out[j]
	}
}

// notReplicated reports whether err is ErrNotReplicated: the server
// answered, and only its replicas were late.
func notReplicated(err error) bool { return errors.Is(err, ErrNotReplicated) }
