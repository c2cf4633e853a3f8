package valkeystore

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/luascript"
	"github.com/valkey-io/valkey-go"
)

// Grants (driver.Granter): each GrantOp is one call of grant.lua on its
// key (and its plain key, in the same slot); the calls of a batch go to
// their nodes, each node's in one pipelined round trip, within the
// earliest deadline of its Ops and through its breaker, as reservations'
// (settle.go): EVAL follows NOSCRIPT, and a call refused by a reply that
// proves it did not run is sent once more. A call that timed out may have
// run: the holder then keeps fewer units than the store counts for it,
// which its next call's report corrects.

// Grant implements driver.Granter.
func (s *Store) Grant(ctx context.Context, batch []driver.GrantOp) error {
	e := s.e
	e.runCalls(ctx, callsOf(batch, e.grantCall), func(i int, r valkey.ValkeyResult) {
		op := &batch[i]
		if err := r.Error(); err != nil {
			op.Err = fmt.Errorf("valkeystore: grant script: %w", err)
			return
		}
		v, err := r.AsIntSlice()
		if err != nil {
			op.Err = fmt.Errorf("valkeystore: grant script: unexpected reply: %w", err)
			return
		}
		op.Result, op.Err = luascript.DecodeGrant(op, v)
		if op.Err != nil {
			op.Err = fmt.Errorf("valkeystore: grant script: %w", op.Err)
		}
	})
	return nil
}

// grantCall checks op, setting op.Err when it is refused before sending,
// and builds its call.
func (e *engine) grantCall(op *driver.GrantOp) rcall {
	c := rcall{key: op.Key, dl: op.Deadline}
	switch {
	case e.replicaAck > 0:
		op.Err = errGrantReplicaAck
	case op.Validate() != nil:
		op.Err = op.Validate()
	}
	if op.Err != nil {
		c.skip = true
		return c
	}
	c.sc, c.keys, c.args = luascript.Grant, luascript.GrantKeys(op), luascript.GrantArgs(op, e.clock())
	return c
}

// errGrantReplicaAck refuses grants on a store WithReplicaAck, whose
// calls they would not wait for.
var errGrantReplicaAck = fmt.Errorf("valkeystore: grants do not wait for replicas: WithReplicaAck covers decisions only, so a store with it refuses them")

// Grant implements driver.Granter once connected; before, every call
// fails with ErrNotConnected.
func (l *Lazy) Grant(ctx context.Context, batch []driver.GrantOp) error {
	st := l.store.Load()
	if st == nil {
		return l.notConnected()
	}
	return st.Grant(ctx, batch)
}
