package valkeystore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/luascript"
	"github.com/valkey-io/valkey-go"
)

// Reservations (driver.Reserver). Each reservation and each settle is one
// script call of one key and its record (in the key's slot): a
// reservation's call is the algorithm's script ended by reserve.lua (the
// take and the record), a settle's is settle.lua. The calls of a batch go
// to their nodes, each node's in one pipelined round trip, within the
// earliest deadline of its Ops and through its breaker; EVAL follows
// NOSCRIPT, and a call refused by a reply that proves it did not run is
// sent once more, as for decisions (retry.go). A settle that timed out
// may have run: settling again is safe, it counts once.

// errReplicaAck refuses reservations on a store WithReplicaAck, whose
// calls they would not wait for.
var errReplicaAck = errors.New("valkeystore: reservations do not wait for replicas: WithReplicaAck covers decisions only, so a store with it refuses them")

// Reserve implements driver.Reserver.
func (s *Store) Reserve(ctx context.Context, batch []driver.ReserveOp) error {
	e := s.e
	e.runCalls(ctx, callsOf(batch, e.reserveCall), func(i int, r valkey.ValkeyResult) {
		op := &batch[i]
		callErr := r.Error()
		var reply string
		var replyErr error
		if callErr == nil {
			reply, replyErr = r.ToString()
		}
		ops := []driver.Op{op.Op}
		luascript.FillCall(ops, []int{0}, "valkeystore", op.Rule.Algorithm, reply, callErr, replyErr)
		op.Op = ops[0]
	})
	return nil
}

// Settle implements driver.Reserver.
func (s *Store) Settle(ctx context.Context, batch []driver.SettleOp) error {
	e := s.e
	e.runCalls(ctx, callsOf(batch, e.settleCall), func(i int, r valkey.ValkeyResult) {
		op := &batch[i]
		if err := r.Error(); err != nil {
			op.Err = fmt.Errorf("valkeystore: settle script: %w", err)
			return
		}
		reply, err := r.ToString()
		if err != nil {
			op.Err = fmt.Errorf("valkeystore: settle script: unexpected reply: %w", err)
			return
		}
		op.Result, op.Err = luascript.DecodeSettle(reply)
		if op.Err != nil {
			op.Err = fmt.Errorf("valkeystore: settle script: %w", op.Err)
		}
	})
	return nil
}

// callsOf builds the script call of each op of batch with call.
func callsOf[T any](batch []T, call func(op *T) rcall) []rcall {
	calls := make([]rcall, len(batch))
	for i := range batch {
		calls[i] = call(&batch[i])
	}
	return calls
}

// reserveCall checks op, setting op.Err when it is refused before
// sending (its call skipped), and builds its script call: the algorithm's
// script ended by reserve.lua.
func (e *engine) reserveCall(op *driver.ReserveOp) rcall {
	c := rcall{key: op.Key, dl: op.Deadline}
	sc := luascript.ReserveFor(&op.Rule)
	switch {
	case e.replicaAck > 0:
		op.Err = errReplicaAck
	case op.Validate() != nil:
		op.Err = op.Validate()
	case op.PenaltyKey != "" || !op.Penalty.IsZero():
		op.Err = fmt.Errorf("valkeystore: reservation of %q: a reservation takes no penalty", op.Key)
	case op.Cost < 0 || op.Record == "" || op.Life < time.Millisecond || op.Life%time.Millisecond != 0:
		op.Err = fmt.Errorf("valkeystore: reservation of %q: record %q, life %v, estimate %d", op.Key, op.Record, op.Life, op.Cost)
	case sc == nil:
		op.Err = fmt.Errorf("valkeystore: %v keeps no reservations", op.Rule.Algorithm)
	}
	if op.Err != nil {
		c.skip = true
		return c
	}
	keys, ovIdx, recIdx := luascript.ReserveKeys(op)
	args := luascript.AppendArgs(nil, &op.Op, ovIdx, 0, e.clock())
	c.sc, c.keys = sc, keys
	c.args = []string{bytesString(args), bytesString(luascript.AppendReserveArgs(nil, op, recIdx))}
	return c
}

// settleCall checks op, setting op.Err when it is refused before sending
// (its call skipped), and builds its script call, settle.lua.
func (e *engine) settleCall(op *driver.SettleOp) rcall {
	c := rcall{key: op.Key, dl: op.Deadline}
	switch {
	case e.replicaAck > 0:
		op.Err = errReplicaAck
	case (&driver.Op{Rule: op.Rule, Now: op.Now}).Validate() != nil:
		op.Err = (&driver.Op{Rule: op.Rule, Now: op.Now}).Validate()
	case op.Actual < 0 || op.Actual > driver.MaxSettle || op.MaxDebt < 0 || op.Record == "":
		op.Err = fmt.Errorf("valkeystore: settle of %q: actual %d, max debt %d, record %q", op.Key, op.Actual, op.MaxDebt, op.Record)
	case luascript.ReserveFor(&op.Rule) == nil:
		op.Err = fmt.Errorf("valkeystore: %v keeps no reservations", op.Rule.Algorithm)
	}
	if op.Err != nil {
		c.skip = true
		return c
	}
	keys, ovIdx := luascript.SettleKeys(op)
	args, split := luascript.AppendSettleArgs(nil, op, ovIdx, e.clock())
	c.sc, c.keys = luascript.Settle, keys
	c.args = []string{bytesString(args[:split]), bytesString(args[split:])}
	return c
}

func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// An rcall is one script call of a reservation or a settle.
type rcall struct {
	key  string
	dl   time.Time
	skip bool // refused before sending
	sc   *luascript.Script
	keys []string
	args []string
}

func (c *rcall) command(cl valkey.Client, sha bool) valkey.Completed {
	if sha {
		return cl.B().Evalsha().Sha1(c.sc.SHA).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build()
	}
	return cl.B().Eval().Script(c.sc.Src).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build()
}

// runCalls sends the calls not skipped, grouped by node, the nodes in
// parallel, and passes each reply to done.
func (e *engine) runCalls(ctx context.Context, calls []rcall, done func(i int, r valkey.ValkeyResult)) {
	byNode := map[*node][]int{}
	for i := range calls {
		if !calls[i].skip {
			n := e.nodeOf(calls[i].key)
			byNode[n] = append(byNode[n], i)
		}
	}
	var wg sync.WaitGroup
	for n, idx := range byNode {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resps := n.sendCalls(ctx, calls, idx)
			for j, i := range idx {
				done(i, resps[j])
			}
		}()
	}
	wg.Wait()
}

// sendCalls sends the calls idx of one node in one pipelined round trip,
// within their earliest deadline and through the node's breaker.
func (n *node) sendCalls(ctx context.Context, calls []rcall, idx []int) []valkey.ValkeyResult {
	e := n.e
	resps := make([]valkey.ValkeyResult, len(idx))
	var dl time.Time
	for _, i := range idx {
		if d := calls[i].dl; !d.IsZero() && (dl.IsZero() || d.Before(dl)) {
			dl = d
		}
	}
	if !dl.IsZero() {
		var end callEnd
		ctx, end = withDeadline(ctx, dl)
		defer end.end()
	}
	if err := ctx.Err(); err != nil {
		for j := range resps {
			resps[j] = valkey.NewErrorResult(err)
		}
		return resps
	}
	budget := budgetOf(dl)
	p, err := n.breaker.allow(budget)
	if err != nil {
		for j := range resps {
			resps[j] = valkey.NewErrorResult(err)
		}
		return resps
	}
	round := func(only []int, sha bool) {
		cmds := make(valkey.Commands, len(only))
		for k, j := range only {
			cmds[k] = calls[idx[j]].command(e.client, sha)
		}
		for k, r := range n.guard.doMulti(ctx, e.client, cmds) {
			resps[only[k]] = r
		}
	}
	all := make([]int, len(idx))
	for j := range all {
		all[j] = j
	}
	round(all, true)
	if redo := pick(resps, isNoScript); redo != nil {
		round(redo, false)
	}
	if redo := pick(resps, notRun); redo != nil && retryWait(ctx) {
		e.refreshIfOlder(refreshAfterFailure)
		round(redo, true)
		if again := pick(resps, isNoScript); again != nil {
			round(again, false)
		}
	}
	n.breaker.record(ctx, p, budget, resps)
	return resps
}

// Reserve implements driver.Reserver once connected; before, every
// reservation fails with ErrNotConnected (the limiter's fail mode decides).
func (l *Lazy) Reserve(ctx context.Context, batch []driver.ReserveOp) error {
	st := l.store.Load()
	if st == nil {
		return l.notConnected()
	}
	return st.Reserve(ctx, batch)
}

// Settle implements driver.Reserver once connected, as Reserve.
func (l *Lazy) Settle(ctx context.Context, batch []driver.SettleOp) error {
	st := l.store.Load()
	if st == nil {
		return l.notConnected()
	}
	return st.Settle(ctx, batch)
}
