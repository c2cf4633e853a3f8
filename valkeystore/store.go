// Package valkeystore is the driver.Store on Valkey, standalone, through
// Sentinel, or Cluster, through the caller's valkey-go client.
//
// Each decision is one Lua script (luascript/scripts/*.lua) run with
// EVALSHA, and EVAL when the server lost its script cache (NOSCRIPT after a
// restart or SCRIPT FLUSH), so scripts reload transparently. Decisions of a
// batch that share an algorithm and a node run in one script call, on a
// cluster too, whatever their slots (cross.go); all script calls of a
// batch go out in one pipelined round trip.
//
// The guarantees are layers, each in its own file:
//   - deadline.go: every call returns by its deadline, whatever the
//     network does, with or without a breaker; with two narrow
//     exceptions, both of a call sent straight to valkey-go on a healthy
//     node: a call that starts in the instant its connection drops may
//     wait for the handshake of a call with at most an eighth more time
//     left, and so return up to an eighth of its time left late; and
//     without AlwaysPipelining, a lone call on a connection that never
//     carried two calls at once returns at its deadline, not at its
//     context's cancellation.
//   - nodes.go: health per node. Each node (a standalone server, the
//     Sentinels' master, or a cluster primary with its slots) has its own
//     batcher, breaker and deadline guard, so a dead primary costs only the
//     decisions of its slots.
//   - budget.go: the batchers of a store's nodes share a budget of calls in
//     flight, each node keeping one of its own.
//   - breaker.go: a circuit breaker per node (see Breaker) makes calls fail
//     at once while the node is down or too slow for them, until a probe
//     sees its slots answer again.
//   - retry.go: a script call is sent again once, within its deadline, only
//     on a reply that proves it did not run (MOVED, ASK, TRYAGAIN,
//     CLUSTERDOWN, READONLY, LOADING, MASTERDOWN); never after a timeout or
//     a broken connection, after which it may have run.
//   - cross.go: batching per node on a cluster, and how a call of several
//     slots is split when its node no longer serves them all.
//   - durable.go: WithReplicaAck, WAIT for replicas, for counts that must
//     survive a failover.
//   - notify.go: delete notices (driver.DeleteNotifier), so that a reset
//     made anywhere reaches every process's deny cache within NoticeBound.
//
// Connect builds the client with what the store needs and connects in the
// background (connect.go). A client given to New needs AlwaysPipelining:
// without it, valkey-go sends a lone call with the connection's read
// deadline set to the call's, and a call that times out closes the
// connection, failing the calls that share it.
package valkeystore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/valkey-io/valkey-go"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/luascript"
)

// Store is a driver.Store on Valkey. It is safe for concurrent use.
type Store struct {
	e *engine
}

// engine is the Store's machinery. It is apart from the Store so that the
// probes of open breakers, which hold the engine, do not keep a Store that
// nobody holds from being garbage collected (which ends them).
type engine struct {
	client     valkey.Client
	maxBatch   int
	breakerCfg *Breaker     // nil when off; see breaker.go
	inflight   int          // WithBatching; see batch.go
	budget     *budget      // the batchers' calls in flight; nil without batching
	cluster    bool         // keys of a script call must share a slot
	topo       topology     // nodes and the slots they serve; see nodes.go
	replicaAck int          // WithReplicaAck; see durable.go
	connectLog *slog.Logger // WithLogger, for Connect only; see connect.go
	// connectExplain is WithConnectError, for Connect only.
	connectExplain func(error) error
	// wrapClient is WithClientWrap, for Connect only.
	wrapClient func(valkey.Client) valkey.Client
	watches    watches // delete notices; see notify.go
	done       chan struct{}
	probe      *probe // what a test injects and observes; nil otherwise
}

// A probe is what a test injects into a Store (see export_test.go): a skew
// added to this host's clock, to play a skewed client, and counters of the
// cross calls (see cross.go) the Store sent and split.
type probe struct {
	skew                    time.Duration
	crossCalls, crossSplits atomic.Int64
}

// An Option configures a Store. Options are functional, as the root
// package's: values of an interface that only this package implements.
type Option interface{ apply(*engine) }

// optionFunc is an Option made of a function, as the root package's.
type optionFunc func(*engine)

func (f optionFunc) apply(x *engine) { f(x) }

// WithMaxKeysPerCall bounds how many decisions of one batch share one
// script call (default 64). A script blocks the server while it runs, so
// larger calls trade others' latency for throughput.
func WithMaxKeysPerCall(n int) Option {
	return optionFunc(func(e *engine) { e.maxBatch = n })
}

// WithBatching sets how many script calls the store keeps in flight at once
// (default 4; 0 turns batching off), across the nodes of a cluster: each
// node may always have one call in flight, and more within that budget.
// Decisions that arrive while their node may not start a call queue, and
// leave together in the next call: one script call then decides many keys,
// which is what lets one Valkey make several times more decisions per
// second than one call per decision. A budget shared by the nodes keeps
// those batches long on a cluster too (a budget per node would cut them
// by the number of primaries), and there a primary starts a call beyond
// its first only when a full call (WithMaxKeysPerCall) is queued for it:
// the primaries' first calls already overlap, and one call in flight per
// busy primary gives the longest batches. A lone decision never waits for
// company.
func WithBatching(inflight int) Option {
	return optionFunc(func(e *engine) { e.inflight = inflight })
}

// New returns a Store on client, which may be a standalone, Sentinel or
// cluster client. The Store does not own the client: closing it is the
// caller's job. On a cluster, New reads the slot map (CLUSTER SLOTS), for
// up to a second.
//
// The client must have been built with ClientOption.AlwaysPipelining, which
// valkey-go offers no way to read back: without it, a call whose deadline
// passes closes the connection it shares with other calls, failing them.
// Connect builds the client itself, with what the store needs, and also
// starts while Valkey is unreachable: prefer it unless the client is
// shared with other code.
func New(client valkey.Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("valkeystore: nil client")
	}
	e, err := configure(opts)
	if err != nil {
		return nil, err
	}
	if e.connectLog != nil {
		return nil, errors.New("valkeystore: WithLogger is an option of Connect, which logs its connection attempts; New makes none")
	}
	if e.wrapClient != nil {
		return nil, errors.New("valkeystore: WithClientWrap is an option of Connect, which builds the client; wrap the client given to New yourself")
	}
	if e.connectExplain != nil {
		return nil, errors.New("valkeystore: WithConnectError is an option of Connect, which reports its connection attempts; New makes none")
	}
	return e.start(client), nil
}

// configure returns an engine with opts applied and checked, without a
// client.
func configure(opts []Option) (*engine, error) {
	e := &engine{maxBatch: 64, breakerCfg: &Breaker{}, inflight: 4}
	for _, o := range opts {
		o.apply(e)
	}
	if err := e.checkConfig(); err != nil {
		return nil, err
	}
	if e.inflight > 0 {
		e.budget = newBudget(e.inflight, e.maxBatch)
	}
	return e, nil
}

// checkConfig applies the breaker's defaults and refuses options out of
// range.
func (e *engine) checkConfig() error {
	if e.breakerCfg != nil {
		cfg := *e.breakerCfg
		if err := initBreaker(&cfg); err != nil {
			return err
		}
		e.breakerCfg = &cfg
	}
	switch {
	case e.maxBatch < 1:
		return fmt.Errorf("valkeystore: max keys per call must be positive, got %d", e.maxBatch)
	case e.replicaAck < 0:
		return fmt.Errorf("valkeystore: replicas to wait for must be zero (off) or positive, got %d", e.replicaAck)
	case e.inflight < 0:
		return fmt.Errorf("valkeystore: calls in flight must be zero (no batching) or positive, got %d", e.inflight)
	}
	return nil
}

// start returns the Store of e, configured, on client.
func (e *engine) start(client valkey.Client) *Store {
	e.client = client
	e.cluster = client.Mode() == valkey.ClientModeCluster
	e.done = make(chan struct{})
	e.initTopology()
	s := &Store{e: e}
	runtime.AddCleanup(s, func(done chan struct{}) { close(done) }, e.done)
	return s
}

// call is one script call: the indices of the Ops it decides.
type call struct {
	alg   driver.Algorithm
	sc    *luascript.Script
	ops   []int
	slot  uint16 // on a cluster, the slot of ops[0]
	cross bool   // its keys span several slots of one node; see cross.go
}

// Do implements driver.Store. The Ops go to the nodes that serve their
// keys; the Ops of different nodes are decided concurrently, each node's
// by its own batcher, breaker and deadline.
func (s *Store) Do(ctx context.Context, batch []driver.Op) error {
	e := s.e
	if len(batch) == 0 {
		return nil
	}
	n := e.nodeOf(batch[0].Key)
	if len(batch) == 1 || !e.cluster {
		return n.do(ctx, batch)
	}
	byNode := map[*node][]int{}
	e.groupByNode(batch, byNode)
	if len(byNode) == 1 {
		return n.do(ctx, batch)
	}
	return doByNode(ctx, batch, byNode)
}

// TransientKeys implements driver.TransientKeys: a call's keys are copied
// into the command it sends (see command), and nothing else keeps an Op's
// Key after Do returns. A type that embeds a *Store inherits it: one whose
// own Do keeps keys must hold the *Store in a named field instead.
func (s *Store) TransientKeys() {}

// groupByNode adds the indexes in batch of each node's Ops to byNode.
func (e *engine) groupByNode(batch []driver.Op, byNode map[*node][]int) {
	for i := range batch {
		m := e.nodeOf(batch[i].Key)
		byNode[m] = append(byNode[m], i)
	}
}

// doByNode decides each node's Ops of batch (byNode) concurrently, and
// returns the first error.
func doByNode(ctx context.Context, batch []driver.Op, byNode map[*node][]int) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for m, idx := range byNode {
		wg.Add(1)
		go func() {
			defer wg.Done()
			part := gather(batch, idx)
			err := m.do(ctx, part)
			mu.Lock()
			defer mu.Unlock()
			if first == nil {
				first = err
			}
			scatter(batch, idx, part)
		}()
	}
	wg.Wait()
	return first
}

// gather copies the Ops of batch at idx.
func gather(batch []driver.Op, idx []int) []driver.Op {
	part := make([]driver.Op, len(idx))
	for j, i := range idx {
		part[j] = batch[i]
	}
	return part
}

// scatter copies part back to the Ops of batch at idx.
func scatter(batch []driver.Op, idx []int, part []driver.Op) {
	for j, i := range idx {
		batch[i] = part[j]
	}
}

// do decides ops, all of this node: through its batcher, or at once.
func (n *node) do(ctx context.Context, ops []driver.Op) error {
	if n.batcher != nil {
		return n.batcher.do(ctx, ops)
	}
	return n.doBy(ctx, ops, earliest(ops))
}

// doBy is send bounded by the deadline dl (none when zero).
func (n *node) doBy(ctx context.Context, batch []driver.Op, dl time.Time) error {
	if !dl.IsZero() {
		var end callEnd
		ctx, end = withDeadline(ctx, dl) // see callctx.go
		defer end.end()
	}
	return n.send(ctx, batch)
}

// send sends batch: its script calls in one pipelined round trip, then
// those that must be sent again (see exchange).
func (n *node) send(ctx context.Context, batch []driver.Op) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e := n.e
	var one [1]call
	calls := e.plan(batch, one[:0], n.crossOK())
	if len(calls) == 0 {
		return nil
	}
	dl, _ := ctx.Deadline()
	budget := budgetOf(dl)
	p, err := n.breaker.allow(budget)
	if err != nil {
		return err // the node's circuit breaker is open: fail fast, no network
	}
	var resps []valkey.ValkeyResult
	var oneResp [1]valkey.ValkeyResult
	if len(calls) == 1 {
		resps = oneResp[:]
	} else {
		resps = make([]valkey.ValkeyResult, len(calls))
	}
	calls, resps = n.exchange(ctx, batch, calls, resps)
	n.breaker.record(ctx, p, budget, resps)
	e.decodeAll(ctx, batch, calls, resps)
	return nil
}

// decodeAll fills in the Results of calls from their replies resps,
// refreshing the topology after a failure.
func (e *engine) decodeAll(ctx context.Context, batch []driver.Op, calls []call, resps []valkey.ValkeyResult) {
	for i, c := range calls {
		if resps[i].Error() != nil && classify(ctx, resps[i].Error()) == failed {
			e.refreshIfOlder(refreshAfterFailure)
		}
		decode(batch, c, resps[i])
	}
}

// firstOp is the ops of a call that decides batch[0] alone. Read only.
var firstOp = []int{0}

// plan groups the valid Ops of batch into script calls: one per algorithm
// and slot, or with cross (the Ops are all of one cluster node that can be
// sent calls of several slots; see cross.go) one per algorithm, split at
// maxBatch keys. Invalid Ops get their error.
func (e *engine) plan(batch []driver.Op, dst []call, cross bool) []call {
	if len(batch) == 1 { // the common case, without maps or allocations
		return planOne(batch, dst)
	}
	p := planner{e: e, cross: cross, lastCI: -1}
	calls := dst
	for i := range batch {
		op := &batch[i]
		if err := op.Validate(); err != nil {
			op.Err = err
			continue
		}
		calls = p.add(calls, batch, i)
	}
	return calls
}

// planOne plans the call of a lone Op.
func planOne(batch []driver.Op, dst []call) []call {
	if err := batch[0].Validate(); err != nil {
		batch[0].Err = err
		return dst
	}
	return append(dst, call{alg: batch[0].Rule.Algorithm, sc: luascript.ForRule(&batch[0].Rule), ops: firstOp})
}

// A callGroup is the Ops that may share a call: of one script, and on a
// cluster without cross calls, of one slot.
type callGroup struct {
	sc   *luascript.Script
	slot uint16
}

// A planner groups the Ops of a merged batch into calls (see plan). A
// merged batch is usually of one group: its calls are found through last
// (the group of the latest Op and its call), and the map of every group's
// open call is made only once a second group appears. The calls are passed
// in and out, never kept, so that a caller's array of one call stays on
// its stack.
type planner struct {
	e      *engine
	cross  bool
	index  map[callGroup]int
	last   callGroup
	lastCI int
}

// add puts the valid Op batch[i] into its group's open call among calls,
// or a new one when there is none or it is full, and returns calls.
func (p *planner) add(calls []call, batch []driver.Op, i int) []call {
	op := &batch[i]
	g, sl := p.groupOf(op)
	ci := p.open(g)
	if ci < 0 || len(calls[ci].ops) >= p.e.maxBatch {
		ci = len(calls)
		calls = append(calls, p.newCall(g, sl, op, len(batch)-i, ci))
	}
	p.last, p.lastCI = g, ci
	c := &calls[ci]
	c.ops = append(c.ops, i)
	if sl != c.slot {
		c.cross = true
	}
	return calls
}

// groupOf is op's group, and on a cluster its slot.
func (p *planner) groupOf(op *driver.Op) (callGroup, uint16) {
	g := callGroup{sc: luascript.ForRule(&op.Rule)}
	if !p.e.cluster {
		return g, 0
	}
	sl := slot(op.Key)
	if !p.cross {
		g.slot = sl
	}
	return g, sl
}

// open is the index of g's open call, or -1 when it has none.
func (p *planner) open(g callGroup) int {
	switch {
	case p.lastCI >= 0 && g == p.last:
		return p.lastCI
	case p.lastCI >= 0 && p.index == nil:
		p.index = map[callGroup]int{p.last: p.lastCI}
	case p.index == nil:
		return -1
	}
	if v, ok := p.index[g]; ok {
		return v
	}
	return -1
}

// newCall is a new call of group g (slot sl) for op, with rest Ops of the
// batch left from op on, to be the call at index ci.
func (p *planner) newCall(g callGroup, sl uint16, op *driver.Op, rest, ci int) call {
	c := call{alg: op.Rule.Algorithm, sc: g.sc, slot: sl}
	if p.index != nil {
		p.index[g] = ci
	} else { // room for the rest of a batch of one group
		c.ops = make([]int, 0, min(rest, p.e.maxBatch))
	}
	return c
}

// command builds the EVALSHA (or EVAL) of one call: its keys (the
// decisions', then the override and penalty keys) and one string of the decisions'
// records (luascript.AppendArgs).
func (e *engine) command(batch []driver.Op, c call, sha bool) valkey.Completed {
	n := len(c.ops)
	nov, size := argsSize(batch, c.ops)
	// all is the numbers of keys and of decisions (the first ARGV of a
	// cross call), the keys, and the records; one allocation, none for a
	// lone decision: the builder copies the strings, so they may stay on
	// the stack. The decisions' keys and the records are one allocation:
	// valkey-go may still hold the command after the call returned (the
	// deadline layer returns by the deadline), so it is never reused, and
	// the keys are copied into it because their bytes may be reused once
	// Do returns (driver.TransientKeys).
	var lone [5]string
	var all []string
	if size := 3 + n + nov; size <= len(lone) {
		all = lone[:size]
	} else {
		all = make([]string, size)
	}
	keys := all[2 : 2+n : 2+n+nov] // room for the override and penalty keys, which append never moves
	kb := keyBytes(batch, c.ops)
	own := make([]byte, kb, kb+size)
	keys, buf := appendRecords(batch, c.ops, keys, own[kb:], e.clock())
	copyKeys(keys[:n], own[:kb])
	all[len(all)-1] = unsafe.String(unsafe.SliceData(buf), len(buf))
	if c.cross {
		return e.crossCommand(c.sc, sha, all, len(keys), n)
	}
	if sha {
		return e.client.B().Evalsha().Sha1(c.sc.SHA).Numkeys(int64(len(keys))).Key(keys...).Arg(all[len(all)-1]).Build()
	}
	return e.client.B().Eval().Script(c.sc.Src).Numkeys(int64(len(keys))).Key(keys...).Arg(all[len(all)-1]).Build()
}

// argsSize is the number of override and penalty keys among the Ops of
// batch at ops, and the size of their records.
func argsSize(batch []driver.Op, ops []int) (nov, size int) {
	for _, i := range ops {
		ov := batch[i].Override != ""
		if ov {
			nov++
		}
		if batch[i].PenaltyKey != "" {
			nov++
		}
		size += luascript.ArgsSize(&batch[i], ov)
	}
	return nov, size
}

// keyBytes is the length of the keys of the Ops of batch at ops.
func keyBytes(batch []driver.Op, ops []int) int {
	n := 0
	for _, i := range ops {
		n += len(batch[i].Key)
	}
	return n
}

// copyKeys copies each key of keys into own (exactly their length) and
// makes keys the copies.
func copyKeys(keys []string, own []byte) {
	for j, k := range keys {
		m := copy(own, k)
		keys[j] = unsafe.String(unsafe.SliceData(own), m)
		own = own[m:]
	}
}

// clock is the time the records carry: now, skewed by a test's probe.
func (e *engine) clock() time.Time {
	clock := time.Now()
	if e.probe != nil {
		clock = clock.Add(e.probe.skew)
	}
	return clock
}

// appendRecords sets keys to the keys of the Ops of batch at ops, appends
// their override keys, and appends their records to buf.
func appendRecords(batch []driver.Op, ops []int, keys []string, buf []byte, clock time.Time) ([]string, []byte) {
	for j, i := range ops {
		op := &batch[i]
		keys[j] = op.Key
		ovKey, penKey := 0, 0
		if op.Override != "" {
			// The override key follows the decisions' keys; it shares the
			// decision's hash tag, so the call stays in one slot.
			keys = append(keys, op.Override)
			ovKey = len(keys)
		}
		if op.PenaltyKey != "" {
			// So does the penalty key (driver.PenaltyKey).
			keys = append(keys, op.PenaltyKey)
			penKey = len(keys)
		}
		buf = luascript.AppendArgs(buf, op, ovKey, penKey, clock)
	}
	return keys, buf
}

// crossCommand builds the call of a cross call: undeclared keys, the
// numbers of keys (nkeys) and of decisions (n), the keys, then the records,
// all in ARGV (see luascript.Script.Cross).
func (e *engine) crossCommand(sc *luascript.Script, sha bool, all []string, nkeys, n int) valkey.Completed {
	if e.probe != nil {
		e.probe.crossCalls.Add(1)
	}
	all[0], all[1] = strconv.Itoa(nkeys), strconv.Itoa(n)
	if sha {
		return e.client.B().Evalsha().Sha1(sc.Cross.SHA).Numkeys(0).Arg(all...).Build()
	}
	return e.client.B().Eval().Script(sc.Cross.Src).Numkeys(0).Arg(all...).Build()
}

// decode fills in the Results of one call from its reply.
func decode(batch []driver.Op, c call, resp valkey.ValkeyResult) {
	callErr := resp.Error()
	var reply string
	var replyErr error
	if callErr == nil {
		reply, replyErr = resp.ToString()
	}
	luascript.FillCall(batch, c.ops, "valkeystore", c.alg, reply, callErr, replyErr)
}

// Delete implements driver.Store: one DEL per key, pipelined to each
// node (keys of different slots cannot share a command on a cluster). It
// publishes no notice: DeleteNotify (Limiter.Reset) does.
func (s *Store) Delete(ctx context.Context, keys ...string) error {
	e := s.e
	byNode := map[*node]valkey.Commands{}
	var order []*node
	for _, k := range keys {
		n := e.nodeOf(k)
		if _, ok := byNode[n]; !ok {
			order = append(order, n)
		}
		byNode[n] = append(byNode[n], e.client.B().Del().Key(k).Build())
	}
	for _, n := range order {
		dl, _ := ctx.Deadline()
		budget := budgetOf(dl)
		p, err := n.breaker.allow(budget)
		if err != nil {
			return fmt.Errorf("valkeystore: delete: %w", err)
		}
		resps := n.guard.doMulti(ctx, e.client, byNode[n])
		n.breaker.record(ctx, p, budget, resps)
		for _, r := range resps {
			if err := r.Error(); err != nil {
				return fmt.Errorf("valkeystore: delete: %w", err)
			}
		}
	}
	return nil
}

// Ping reports whether the store can decide for every key: PING on a
// standalone server; on a cluster, every slot has a primary in the slot
// map (read again), and a slot of every primary answers. Replicas are not
// asked: losing one costs no decision. Ping returns by ctx's end, like a
// decision: valkey-go may hold a call past its deadline behind another
// call's new connection (see deadline.go), so Ping runs on a goroutine of
// its own when ctx can end.
func (s *Store) Ping(ctx context.Context) error {
	if ctx.Done() == nil {
		return s.ping(ctx)
	}
	err, ended := returnBy(ctx, func() error { return s.ping(ctx) })
	if ended != nil {
		return fmt.Errorf("valkeystore: ping: %w", ended)
	}
	return err
}

// ping is Ping, without returning by ctx's end.
func (s *Store) ping(ctx context.Context) error {
	e := s.e
	if !e.cluster {
		return ping(ctx, e.client)
	}
	if err := e.refresh(ctx); err != nil {
		return err
	}
	tab := e.topo.table.Load()
	primaries := map[*node]bool{}
	for sl, n := range tab {
		if n == nil {
			return fmt.Errorf("valkeystore: slot %d has no primary", sl)
		}
		primaries[n] = true
	}
	for n := range primaries {
		if _, err := n.askSlot(ctx); err != nil {
			return fmt.Errorf("valkeystore: primary %s: %w", n.name, err)
		}
	}
	return nil
}

// Penalties implements driver.Penalizer: every decision's script keeps the
// key's penalty state under its penalty key, in the key's slot.
func (s *Store) Penalties() bool { return true }
