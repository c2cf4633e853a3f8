package valkeystore

import (
	"strings"

	"github.com/valkey-io/valkey-go"

	"github.com/sluicehq/sluice/driver"
)

// Batching per node on a cluster. The batcher of a node (batch.go)
// merges the decisions queued for any of its slots, and plan makes one
// script call per algorithm of them, not one per slot: a call whose keys
// span several slots (a cross call) runs the algorithm's Cross script
// (luascript.Script.Cross), which declares allow-cross-slot-keys and takes
// its keys in ARGV, since a server refuses declared keys of several slots
// with CROSSSLOT. Each decision is still one atomic step with its keys in
// one slot; a cross call runs atomically on its node, like any script.
//
// valkey-go routes a call by the slot of its declared keys, so a cross
// call, which declares none, goes straight to the node, through
// valkey-go's client of that node alone (node.direct, on the cluster
// client's own connection to it). Calls whose keys share one slot still go
// through the cluster client, which follows MOVED and ASK itself.
//
// The store's slot map may be older than the cluster's layout (a reshard,
// a failover). A cross call sent to a node that no longer serves one of its
// keys is refused before it changes anything: the Cross script reads every
// key first and replies NOTLOCAL when one read fails; and a node that is
// now a replica, loading or cut off from its cluster refuses it with
// READONLY, LOADING or CLUSTERDOWN before it runs. Such a call is split
// into one call per slot, sent at once through the cluster client (after
// the usual short wait unless every refusal was NOTLOCAL), and the slot
// map is read again. A cross call that timed out or lost its connection is
// never sent again (it may have run), like any call; see retry.go.
//
// Cross calls are off with WithReplicaAck (its WAIT must follow the script
// on the connection of the slot's primary) and for the slots missing from
// the map.

// crossOK reports whether n may be sent cross calls.
func (n *node) crossOK() bool {
	e := n.e
	return e.cluster && e.replicaAck == 0 && n != e.topo.none && n.direct.Load() != nil
}

// clientFor returns the client that sends c: the node's own for a cross
// call, else the cluster client.
func (n *node) clientFor(c *call) valkey.Client {
	if c.cross {
		if d := n.direct.Load(); d != nil {
			return *d
		}
	}
	return n.e.client
}

// notLocal reports whether r is a Cross script's refusal of keys its node
// does not serve.
func notLocal(r valkey.ValkeyResult) bool {
	verr, ok := valkey.IsValkeyErr(r.Error())
	return ok && strings.HasPrefix(verr.Error(), "NOTLOCAL ")
}

// split replaces the cross calls among redo (indices in calls, refused by
// a reply that proves they did not run) by one call per slot, and returns
// the calls, their replies (the new calls' still to be made) and the
// indices to send again; wait reports whether any refusal was other than
// NOTLOCAL.
func split(batch []driver.Op, calls []call, resps []valkey.ValkeyResult, redo []int) ([]call, []valkey.ValkeyResult, []int, bool) {
	drop, wait := crossRefused(calls, resps, redo)
	if len(drop) == 0 {
		return calls, resps, redo, wait
	}
	sp := splitter{
		calls: make([]call, 0, len(calls)+len(drop)),
		resps: make([]valkey.ValkeyResult, 0, len(calls)+len(drop)),
	}
	sp.keep(calls, resps, redo, drop)
	for _, i := range redo {
		if drop[i] {
			sp.bySlot(batch, calls[i])
		}
	}
	return sp.calls, sp.resps, sp.again, wait
}

// crossRefused returns the cross calls among redo (drop), and whether any
// refusal was other than NOTLOCAL.
func crossRefused(calls []call, resps []valkey.ValkeyResult, redo []int) (drop map[int]bool, wait bool) {
	drop = make(map[int]bool)
	for _, i := range redo {
		if !notLocal(resps[i]) {
			wait = true
		}
		if calls[i].cross {
			drop[i] = true
		}
	}
	return drop, wait
}

// A splitter builds the calls split returns, their replies, and the
// indices among them to send again.
type splitter struct {
	calls []call
	resps []valkey.ValkeyResult
	again []int
}

// keep copies the calls not dropped, with their replies, marking those of
// redo to send again.
func (sp *splitter) keep(calls []call, resps []valkey.ValkeyResult, redo []int, drop map[int]bool) {
	isRedo := make(map[int]bool, len(redo))
	for _, i := range redo {
		isRedo[i] = true
	}
	for i, c := range calls {
		if drop[i] {
			continue
		}
		if isRedo[i] {
			sp.again = append(sp.again, len(sp.calls))
		}
		sp.calls = append(sp.calls, c)
		sp.resps = append(sp.resps, resps[i])
	}
}

// bySlot adds the cross call c as one call per slot, to send again.
func (sp *splitter) bySlot(batch []driver.Op, c call) {
	bySlot := map[uint16]int{} // slot -> index in sp.calls
	for _, op := range c.ops {
		sl := slot(batch[op].Key)
		j, ok := bySlot[sl]
		if !ok {
			j = len(sp.calls)
			bySlot[sl] = j
			sp.again = append(sp.again, j)
			sp.calls = append(sp.calls, call{alg: c.alg, sc: c.sc, slot: sl})
			sp.resps = append(sp.resps, valkey.ValkeyResult{})
		}
		sp.calls[j].ops = append(sp.calls[j].ops, op)
	}
}
