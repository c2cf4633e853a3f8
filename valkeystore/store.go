// Package valkeystore is the sluice.Store on Valkey, standalone or Cluster,
// through the caller's valkey-go client.
//
// Each decision is one Lua script (valkeystore/scripts/*.lua) run with
// EVALSHA, and EVAL when the server lost its script cache (NOSCRIPT after a
// restart or SCRIPT FLUSH), so scripts reload transparently. Decisions of a
// batch that share an algorithm and a cluster slot run in one script call;
// all script calls of a batch go out in one pipelined round trip. A script
// call is never retried after it was sent: it may have run, and a retry
// would count twice. A circuit breaker (see Breaker) makes calls fail at
// once while Valkey is down or hung, until a background probe sees it back.
package valkeystore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/valkey-io/valkey-go"
)

// Store is a sluice.Store on Valkey. It is safe for concurrent use.
type Store struct {
	client   valkey.Client
	maxBatch int
	breaker  *breaker // nil when off; see breaker.go
	inflight int      // WithBatching
	cluster  bool     // keys of a script call must share a slot
	batcher  *batcher // nil when off; see batch.go
}

// An Option configures a Store.
type Option func(*Store)

// WithMaxKeysPerCall bounds how many decisions of one batch share one
// script call (default 64). A script blocks the server while it runs, so
// larger calls trade others' latency for throughput.
func WithMaxKeysPerCall(n int) Option {
	return func(s *Store) { s.maxBatch = n }
}

// WithBatching sets how many script calls the store keeps in flight at once
// (default 4; 0 turns batching off). Decisions that arrive while that many
// are in flight queue, and leave together in the next call: one script call
// then decides many keys, which is what lets one Valkey make several times
// more decisions per second than one call per decision. A lone decision
// never waits for company.
func WithBatching(inflight int) Option {
	return func(s *Store) { s.inflight = inflight }
}

// New returns a Store on client, which may be a standalone or a cluster
// client. The Store does not own the client: closing it is the caller's job.
func New(client valkey.Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("valkeystore: nil client")
	}
	s := &Store{client: client, maxBatch: 64, breaker: &breaker{}, inflight: 4}
	for _, o := range opts {
		o(s)
	}
	if err := s.breaker.init(s); err != nil {
		return nil, err
	}
	if s.maxBatch < 1 {
		return nil, fmt.Errorf("valkeystore: max keys per call must be positive, got %d", s.maxBatch)
	}
	if s.inflight < 0 {
		return nil, fmt.Errorf("valkeystore: calls in flight must be zero (no batching) or positive, got %d", s.inflight)
	}
	if s.inflight > 0 {
		s.batcher = newBatcher(s, s.inflight)
	}
	s.cluster = client.Mode() == valkey.ClientModeCluster
	return s, nil
}

// call is one script call: the indices of the Ops it decides.
type call struct {
	alg sluice.Algorithm
	ops []int
}

// Do implements sluice.Store.
func (s *Store) Do(ctx context.Context, batch []sluice.Op) error {
	if s.batcher != nil {
		return s.batcher.do(ctx, batch)
	}
	return s.doBy(ctx, batch, earliest(batch))
}

// doBy is do bounded by the deadline dl (none when zero).
func (s *Store) doBy(ctx context.Context, batch []sluice.Op, dl time.Time) error {
	if !dl.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl)
		defer cancel()
	}
	return s.do(ctx, batch)
}

// do sends batch: its script calls in one pipelined round trip.
func (s *Store) do(ctx context.Context, batch []sluice.Op) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var one [1]call
	calls := s.plan(batch, one[:0])
	if len(calls) == 0 {
		return nil
	}
	trial, err := s.breaker.allow()
	if err != nil {
		return err // the circuit breaker is open: fail fast, no network
	}
	if len(calls) == 1 { // one script call: no slices of commands
		var resps [1]valkey.ValkeyResult
		resps[0] = s.breaker.do(ctx, s.client, trial, s.command(batch, calls[0], true))
		if isNoScript(resps[0]) {
			resps[0] = s.breaker.do(ctx, s.client, trial, s.command(batch, calls[0], false))
		}
		s.breaker.record(ctx, trial, resps[:])
		decode(batch, calls[0], resps[0])
		return nil
	}
	cmds := make(valkey.Commands, len(calls))
	for i, c := range calls {
		cmds[i] = s.command(batch, c, true)
	}
	resps := s.breaker.doMulti(ctx, s.client, trial, cmds)

	// Scripts lost to a restart or SCRIPT FLUSH: send the source once.
	var retry []int
	for i, r := range resps {
		if isNoScript(r) {
			retry = append(retry, i)
		}
	}
	if len(retry) > 0 {
		evals := make(valkey.Commands, len(retry))
		for j, i := range retry {
			evals[j] = s.command(batch, calls[i], false)
		}
		for j, r := range s.breaker.doMulti(ctx, s.client, trial, evals) {
			resps[retry[j]] = r
		}
	}
	s.breaker.record(ctx, trial, resps)
	for i, c := range calls {
		decode(batch, c, resps[i])
	}
	return nil
}

func isNoScript(r valkey.ValkeyResult) bool {
	verr, ok := valkey.IsValkeyErr(r.Error())
	return ok && verr.IsNoScript()
}

// firstOp is the ops of a call that decides batch[0] alone. Read only.
var firstOp = []int{0}

// plan groups the valid Ops of batch into script calls: one per algorithm
// and slot, split at maxBatch keys. Invalid Ops get their error.
func (s *Store) plan(batch []sluice.Op, dst []call) []call {
	if len(batch) == 1 { // the common case, without maps or allocations
		if err := batch[0].Rule.Validate(); err != nil {
			batch[0].Err = err
			return dst
		}
		return append(dst, call{alg: batch[0].Rule.Algorithm, ops: firstOp})
	}
	type group struct {
		alg  sluice.Algorithm
		slot uint16
	}
	index := make(map[group]int)
	calls := dst
	for i := range batch {
		op := &batch[i]
		if err := op.Rule.Validate(); err != nil {
			op.Err = err
			continue
		}
		g := group{alg: op.Rule.Algorithm}
		if s.cluster {
			g.slot = slot(op.Key)
		}
		ci, ok := index[g]
		if !ok || len(calls[ci].ops) >= s.maxBatch {
			ci = len(calls)
			index[g] = ci
			calls = append(calls, call{alg: g.alg})
		}
		calls[ci].ops = append(calls[ci].ops, i)
	}
	return calls
}

// command builds the EVALSHA (or EVAL) of one call.
func (s *Store) command(batch []sluice.Op, c call, sha bool) valkey.Completed {
	n := len(c.ops)
	// One allocation for the keys and arguments, one for the digits of all
	// the numbers. buf is made large enough never to grow (a number takes at
	// most maxDigits bytes), so the strings can share it.
	strs := make([]string, n+n*argsPerKey)
	keys, args := strs[:n], strs[n:]
	buf := make([]byte, 0, n*argsPerKey*maxDigits)
	str := func(from int) string { return unsafe.String(&buf[from], len(buf)-from) }
	num := func(v int64) string {
		from := len(buf)
		buf = strconv.AppendInt(buf, v, 10)
		return str(from)
	}
	for j, i := range c.ops {
		op := &batch[i]
		r := &op.Rule
		keys[j] = op.Key
		a := args[j*argsPerKey : (j+1)*argsPerKey]
		a[0] = "0" // the server's TIME
		if !op.Now.IsZero() {
			a[0] = num(op.Now.UnixMicro())
		}
		a[1] = num(r.Limit)
		a[2] = num(r.Param())
		a[3] = num(op.Cost)
		a[4] = "0"
		if r.CountRejected {
			a[4] = "1"
		}
	}
	sc := scripts[c.alg]
	if sha {
		return s.client.B().Evalsha().Sha1(sc.sha).Numkeys(int64(n)).Key(keys...).Arg(args...).Build()
	}
	return s.client.B().Eval().Script(sc.src).Numkeys(int64(n)).Key(keys...).Arg(args...).Build()
}

// maxDigits bounds the length of one formatted number: an int64 takes at
// most 20 bytes.
const maxDigits = 20

// decode fills in the Results of one call from its reply.
func decode(batch []sluice.Op, c call, resp valkey.ValkeyResult) {
	fail := func(err error) {
		for _, i := range c.ops {
			batch[i].Err = err
		}
	}
	if err := resp.Error(); err != nil {
		fail(fmt.Errorf("valkeystore: %v script: %w", c.alg, err))
		return
	}
	msgs, err := resp.ToArray()
	if err != nil {
		fail(fmt.Errorf("valkeystore: %v script: unexpected reply: %w", c.alg, err))
		return
	}
	if len(msgs) != len(c.ops)*replyPerKey {
		fail(fmt.Errorf("valkeystore: %v script: %d values in reply, want %d", c.alg, len(msgs), len(c.ops)*replyPerKey))
		return
	}
	for j, i := range c.ops {
		var v [replyPerKey]int64
		for k := range v {
			if v[k], err = msgs[j*replyPerKey+k].AsInt64(); err != nil {
				break
			}
		}
		if err != nil {
			batch[i].Err = fmt.Errorf("valkeystore: %v script: unexpected reply: %w", c.alg, err)
			continue
		}
		if v[0] != 0 && v[0] != 1 || v[1] < 0 || v[2] < 0 || v[3] < 0 {
			batch[i].Err = fmt.Errorf("valkeystore: %v script: reply out of range: %v", c.alg, v)
			continue
		}
		batch[i].Result = sluice.Result{
			Allowed:    v[0] == 1,
			Remaining:  v[1],
			RetryAfter: micros(v[2]),
			ResetAfter: micros(v[3]),
		}
	}
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// Delete implements sluice.Store: one DEL per key, pipelined (keys of
// different slots cannot share a command on a cluster).
func (s *Store) Delete(ctx context.Context, keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	trial, err := s.breaker.allow()
	if err != nil {
		return fmt.Errorf("valkeystore: delete: %w", err)
	}
	cmds := make(valkey.Commands, len(keys))
	for i, k := range keys {
		cmds[i] = s.client.B().Del().Key(k).Build()
	}
	resps := s.breaker.doMulti(ctx, s.client, trial, cmds)
	s.breaker.record(ctx, trial, resps)
	for _, r := range resps {
		if err := r.Error(); err != nil {
			return fmt.Errorf("valkeystore: delete: %w", err)
		}
	}
	return nil
}

// Ping reports whether the store answers (PING on every primary).
func (s *Store) Ping(ctx context.Context) error {
	for addr, n := range s.client.Nodes() {
		if err := n.Do(ctx, n.B().Ping().Build()).Error(); err != nil {
			return fmt.Errorf("valkeystore: ping %s: %w", addr, err)
		}
	}
	return nil
}
