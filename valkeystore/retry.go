package valkeystore

import (
	"context"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/sluicehq/sluice/driver"
)

// Retries. A script call is sent again only on a reply that proves it did
// not run; never after a timeout or a broken connection, after which it
// may have run, and a retry would count twice.
//
// What valkey-go (v1.0.79) does by itself, for a script call (EVALSHA and
// EVAL are not marked retryable in valkey-go, so its own retries of
// read-only commands never apply to them):
//   - MOVED and ASK: followed at once, to the node named in the reply, and
//     MOVED updates its slot map. The store never sees them unless the
//     client's MaxMovedRedirections is exceeded.
//   - TRYAGAIN, CLUSTERDOWN, LOADING: returned, with a refresh of the slot
//     map scheduled (after a random delay of up to a second).
//   - READONLY (a primary demoted to replica): returned, and nothing else;
//     its slot map stays as it was.
//   - a network error: returned, with a refresh scheduled.
//
// The store sends a call again once, within its deadline, when its reply
// is one of those refusals (and NOSCRIPT, answered with the script's
// source; see exchange), after a short wait that lets a failover, a
// resharding step or a refresh of the client's map progress.

// notRun reports whether r is a refusal that proves the script did not run
// and may succeed if sent again: MOVED, ASK, TRYAGAIN, CLUSTERDOWN,
// READONLY, LOADING, MASTERDOWN, and a cross call's NOTLOCAL (cross.go).
func notRun(r valkey.ValkeyResult) bool {
	verr, ok := valkey.IsValkeyErr(r.Error())
	if !ok {
		return false
	}
	msg := verr.Error()
	for _, p := range retryable {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

var retryable = [...]string{"MOVED ", "ASK ", "TRYAGAIN", "CLUSTERDOWN", "READONLY", "LOADING", "MASTERDOWN", "NOTLOCAL "}

func isNoScript(r valkey.ValkeyResult) bool {
	verr, ok := valkey.IsValkeyErr(r.Error())
	return ok && verr.IsNoScript()
}

// Retry timing: the wait before the one retry is a third of the time left,
// at most retryMaxWait; no retry when less than retryMinLeft would be left
// after the wait.
const (
	retryMaxWait = 25 * time.Millisecond
	retryMinLeft = time.Millisecond
)

// exchange sends the script calls of batch and fills in their replies:
// EVALSHA first, EVAL for the scripts the server lost (NOSCRIPT), and one
// more round for the calls refused by a reply that proves they did not
// run (notRun), when the deadline leaves time for it.
//
// A cross call (cross.go) refused that way is split into one call per
// slot for the retry, and exchange returns the calls and replies as they
// end up.
func (n *node) exchange(ctx context.Context, batch []driver.Op, calls []call, resps []valkey.ValkeyResult) ([]call, []valkey.ValkeyResult) {
	n.roundThenEval(ctx, batch, calls, resps, nil)
	redo := pick(resps, notRun)
	if redo == nil {
		return calls, resps
	}
	n.e.probe.countSplits(calls, redo)
	calls, resps, redo, wait := split(batch, calls, resps, redo)
	if !mayRetry(ctx, wait) {
		return calls, resps
	}
	n.e.refreshIfOlder(refreshAfterFailure)
	n.roundThenEval(ctx, batch, calls, resps, redo)
	return calls, resps
}

// roundThenEval is a round of EVALSHA of the calls listed in only (all
// when nil), then one of EVAL for the scripts the server lost (NOSCRIPT).
func (n *node) roundThenEval(ctx context.Context, batch []driver.Op, calls []call, resps []valkey.ValkeyResult, only []int) {
	n.round(ctx, batch, calls, resps, only, true)
	if again := pick(resps, isNoScript); again != nil {
		n.round(ctx, batch, calls, resps, again, false)
	}
}

// countSplits counts the cross calls among redo, which split splits.
func (p *probe) countSplits(calls []call, redo []int) {
	if p == nil {
		return
	}
	for _, i := range redo {
		if calls[i].cross {
			p.crossSplits.Add(1)
		}
	}
}

// mayRetry reports whether a retry may be sent: after the wait when one
// is due (wait), else while ctx lasts.
func mayRetry(ctx context.Context, wait bool) bool {
	if wait {
		return retryWait(ctx)
	}
	return ctx.Err() == nil
}

// round sends the calls listed in only (all when nil) in one pipelined
// round trip, by EVALSHA or EVAL, and stores their replies in resps.
func (n *node) round(ctx context.Context, batch []driver.Op, calls []call, resps []valkey.ValkeyResult, only []int, sha bool) {
	e := n.e
	if e.replicaAck > 0 {
		n.roundDurable(ctx, batch, calls, resps, only, sha)
		return
	}
	if only == nil {
		if len(calls) == 1 { // no slices of commands
			resps[0] = n.guard.do(ctx, n.clientFor(&calls[0]), e.command(batch, calls[0], sha))
			return
		}
		only = allIndexes(len(calls))
	}
	n.pipelines(ctx, batch, calls, resps, only, sha)
}

// allIndexes is 0, 1, ..., n-1.
func allIndexes(n int) []int {
	only := make([]int, n)
	for i := range only {
		only[i] = i
	}
	return only
}

// pipelines sends the calls listed in only and stores their replies in
// resps. Cross calls go to the node's own client, the others to the
// cluster client: two pipelines, sent at the same time.
func (n *node) pipelines(ctx context.Context, batch []driver.Op, calls []call, resps []valkey.ValkeyResult, only []int, sha bool) {
	e := n.e
	cross, plain := partitionCross(calls, only)
	if len(cross) == 0 || len(plain) == 0 {
		storeReplies(resps, only, n.guard.doMulti(ctx, n.clientFor(&calls[only[0]]), e.commands(batch, calls, only, sha)))
		return
	}
	// The commands are built here, not on the goroutine that sends the
	// cross calls, which then holds neither batch nor calls: they stay
	// on the caller's stack (see send).
	crossCmds, crossClient := e.commands(batch, calls, cross, sha), n.clientFor(&calls[cross[0]])
	done := make(chan []valkey.ValkeyResult, 1)
	go func() { done <- n.guard.doMulti(ctx, crossClient, crossCmds) }()
	storeReplies(resps, plain, n.guard.doMulti(ctx, n.clientFor(&calls[plain[0]]), e.commands(batch, calls, plain, sha)))
	storeReplies(resps, cross, <-done)
}

// partitionCross splits only into the cross calls and the others.
func partitionCross(calls []call, only []int) (cross, plain []int) {
	for _, i := range only {
		if calls[i].cross {
			cross = append(cross, i)
		} else {
			plain = append(plain, i)
		}
	}
	return cross, plain
}

// commands builds the commands of the calls listed in idx.
func (e *engine) commands(batch []driver.Op, calls []call, idx []int, sha bool) valkey.Commands {
	cmds := make(valkey.Commands, len(idx))
	for j, i := range idx {
		cmds[j] = e.command(batch, calls[i], sha)
	}
	return cmds
}

// storeReplies stores the replies out of the calls listed in idx.
func storeReplies(resps []valkey.ValkeyResult, idx []int, out []valkey.ValkeyResult) {
	for j, r := range out {
		resps[idx[j]] = r
	}
}

// pick returns the indices of the replies for which match holds, or nil.
func pick(resps []valkey.ValkeyResult, match func(valkey.ValkeyResult) bool) []int {
	var out []int
	for i, r := range resps {
		if r.Error() != nil && match(r) {
			out = append(out, i)
		}
	}
	return out
}

// retryWait waits before a retry and reports whether the deadline of ctx
// leaves time for it.
func retryWait(ctx context.Context) bool {
	wait := retryMaxWait
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		wait = min(wait, left/3)
		if left-wait < retryMinLeft {
			return false
		}
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
