// Package redisstore is the driver.Store on a go-redis v9 client: a
// standalone, Sentinel (failover) or Cluster client, as
// redis.NewUniversalClient makes them, talking to Valkey or Redis.
//
// It runs the same Lua scripts as valkeystore, one script call (EVALSHA,
// and EVAL when the server lost its scripts) per algorithm and hash tag of
// a batch, all calls of a batch pipelined. A script call is never retried
// once sent: it may have run, and a retry would count twice. The package is
// a module of its own, so that go-redis is not a dependency of Sluice's
// other users.
//
// The client must honour context deadlines (ContextTimeoutEnabled: true),
// or a decision could outlast its timeout by go-redis's read timeout; New
// refuses a client without it. Options returns the options to build such a
// client from yours.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/luascript"
)

// Store is a driver.Store on a go-redis client. It is safe for concurrent
// use.
type Store struct {
	client   redis.UniversalClient
	cluster  bool
	maxBatch int
}

// An Option configures a Store.
type Option interface{ apply(*Store) }

// optionFunc is an Option made of a function, as the root package's.
type optionFunc func(*Store)

func (f optionFunc) apply(x *Store) { f(x) }

// WithMaxKeysPerCall bounds how many decisions of one batch share one
// script call (default 64). A script blocks the server while it runs, so
// larger calls trade others' latency for throughput.
func WithMaxKeysPerCall(n int) Option { return optionFunc(func(s *Store) { s.maxBatch = n }) }

// ErrClient is returned by New for a client the Store cannot use safely.
var ErrClient = errors.New("redisstore: unsuitable client")

// Options returns a copy of opt with what the Store needs:
// ContextTimeoutEnabled, so that each decision ends by its deadline.
//
//	client := redis.NewUniversalClient(redisstore.Options(&redis.UniversalOptions{Addrs: addrs}))
func Options(opt *redis.UniversalOptions) *redis.UniversalOptions {
	cp := *opt
	cp.ContextTimeoutEnabled = true
	return &cp
}

// New returns a Store on client: a *redis.Client (standalone or Sentinel
// failover) or a *redis.ClusterClient with ContextTimeoutEnabled. The Store
// does not own the client: closing it is the caller's job.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	cluster, err := checkClient(client)
	if err != nil {
		return nil, err
	}
	s := &Store{client: client, maxBatch: 64, cluster: cluster}
	for _, o := range opts {
		o.apply(s)
	}
	if s.maxBatch < 1 {
		return nil, fmt.Errorf("redisstore: max keys per call must be positive, got %d", s.maxBatch)
	}
	return s, nil
}

// checkClient refuses a client New cannot use, and reports whether it is
// a cluster's.
func checkClient(client redis.UniversalClient) (cluster bool, err error) {
	switch c := client.(type) {
	case *redis.Client:
		if c == nil {
			return false, fmt.Errorf("%w: nil client", ErrClient)
		}
		return false, checkTimeouts(c.Options().ContextTimeoutEnabled)
	case *redis.ClusterClient:
		if c == nil {
			return false, fmt.Errorf("%w: nil client", ErrClient)
		}
		return true, checkTimeouts(c.Options().ContextTimeoutEnabled)
	case nil:
		return false, fmt.Errorf("%w: nil client", ErrClient)
	default:
		return false, fmt.Errorf("%w: %T (want *redis.Client or *redis.ClusterClient; a Ring spreads keys by its own hashing, which the scripts' keys do not follow)", ErrClient, client)
	}
}

// checkTimeouts refuses a client without ContextTimeoutEnabled.
func checkTimeouts(enabled bool) error {
	if !enabled {
		return fmt.Errorf("%w: ContextTimeoutEnabled is false, so go-redis would ignore each decision's deadline; set it (redisstore.Options does)", ErrClient)
	}
	return nil
}

// scriptCmd is a script call that go-redis must never retry: a call sent
// may have run, and a retry would count twice.
type scriptCmd struct{ *redis.Cmd }

func (scriptCmd) NoRetry() bool { return true }

// call is one script call: the indices of the Ops it decides.
type call struct {
	alg driver.Algorithm
	sc  *luascript.Script
	ops []int
}

// Do implements driver.Store.
func (s *Store) Do(ctx context.Context, batch []driver.Op) error {
	if len(batch) == 0 {
		return nil
	}
	ctx, cancel := withEarliest(ctx, batch)
	defer cancel()
	if err := ctx.Err(); err != nil {
		return err
	}
	calls := s.plan(batch)
	if len(calls) == 0 {
		return nil
	}
	cmds := make([]scriptCmd, len(calls))
	for i, c := range calls {
		cmds[i] = command(ctx, batch, c, true)
	}
	s.run(ctx, cmds)
	s.rerunNoScript(ctx, batch, calls, cmds)
	for i, c := range calls {
		decode(batch, c, cmds[i])
	}
	return nil
}

// withEarliest bounds ctx by the earliest Deadline of batch, if any.
func withEarliest(ctx context.Context, batch []driver.Op) (context.Context, context.CancelFunc) {
	if dl := earliest(batch); !dl.IsZero() {
		return context.WithDeadline(ctx, dl)
	}
	return ctx, func() {}
}

// rerunNoScript sends again in full, by EVAL, the calls whose commands
// cmds a server that lost its scripts (restart, SCRIPT FLUSH) answered
// NOSCRIPT, without running anything.
func (s *Store) rerunNoScript(ctx context.Context, batch []driver.Op, calls []call, cmds []scriptCmd) {
	again := noScripts(cmds)
	if len(again) == 0 {
		return
	}
	re := make([]scriptCmd, len(again))
	for j, i := range again {
		re[j] = command(ctx, batch, calls[i], false)
	}
	s.run(ctx, re)
	for j, i := range again {
		cmds[i] = re[j]
	}
}

// noScripts is the indexes of the commands answered NOSCRIPT.
func noScripts(cmds []scriptCmd) []int {
	var again []int
	for i := range cmds {
		if isNoScript(cmds[i].Err()) {
			again = append(again, i)
		}
	}
	return again
}

// run sends cmds: one alone, several in one pipeline (go-redis splits it
// by node on a cluster). Errors are left in the commands.
func (s *Store) run(ctx context.Context, cmds []scriptCmd) {
	if len(cmds) == 1 {
		_ = s.client.Process(ctx, cmds[0])
		return
	}
	pipe := s.client.Pipeline()
	for _, c := range cmds {
		_ = pipe.Process(ctx, c)
	}
	_, _ = pipe.Exec(ctx)
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// earliest returns the earliest Deadline of batch, zero if none has one.
func earliest(batch []driver.Op) time.Time {
	var dl time.Time
	for i := range batch {
		if d := batch[i].Deadline; !d.IsZero() && (dl.IsZero() || d.Before(dl)) {
			dl = d
		}
	}
	return dl
}

// plan groups the valid Ops of batch into script calls: one per script
// (an algorithm's, or the calendar one) (and on a cluster per hash tag, so that a call's keys share a slot),
// split at maxBatch keys. Invalid Ops get their error.
func (s *Store) plan(batch []driver.Op) []call {
	type group struct {
		sc  *luascript.Script
		tag string
	}
	index := map[group]int{}
	var calls []call
	for i := range batch {
		op := &batch[i]
		if err := op.Validate(); err != nil {
			op.Err = err
			continue
		}
		g := group{sc: luascript.ForRule(&op.Rule)}
		if s.cluster {
			g.tag = hashTag(op.Key)
		}
		ci, ok := index[g]
		if !ok || len(calls[ci].ops) >= s.maxBatch {
			ci = len(calls)
			index[g] = ci
			calls = append(calls, call{alg: op.Rule.Algorithm, sc: g.sc})
		}
		calls[ci].ops = append(calls[ci].ops, i)
	}
	return calls
}

// hashTag returns what a cluster hashes of key: the part between the first
// '{' and the next '}' when not empty, else the whole key. Keys with equal
// tags share a slot.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// command builds the EVALSHA (or EVAL) of one call: its keys and one
// string of the decisions' records (luascript.AppendArgs).
func command(ctx context.Context, batch []driver.Op, c call, sha bool) scriptCmd {
	sc := c.sc
	n := len(c.ops)
	args := make([]any, 0, 4+n)
	if sha {
		args = append(args, "evalsha", sc.SHA)
	} else {
		args = append(args, "eval", sc.Src)
	}
	nk := len(args)
	args = append(args, n)
	size := 0
	for _, i := range c.ops {
		args = append(args, batch[i].Key)
		size += luascript.ArgsSize(&batch[i], false)
	}
	// The penalty keys (driver.PenaltyKey) follow the decisions' keys, in
	// their slot.
	keys := n
	pen := make([]int, len(c.ops))
	for j, i := range c.ops {
		if batch[i].PenaltyKey != "" {
			args = append(args, batch[i].PenaltyKey)
			keys++
			pen[j] = keys
		}
	}
	args[nk] = keys
	buf := make([]byte, 0, size)
	clock := time.Now()
	for j, i := range c.ops {
		buf = luascript.AppendArgs(buf, &batch[i], 0, pen[j], clock)
	}
	return scriptCmd{redis.NewCmd(ctx, append(args, buf)...)}
}

// decode fills in the Results of one call from its reply.
func decode(batch []driver.Op, c call, cmd scriptCmd) {
	callErr := cmd.Err()
	var reply string
	var replyErr error
	if callErr == nil {
		reply, replyErr = cmd.Text()
	}
	luascript.FillCall(batch, c.ops, "redisstore", c.alg, reply, callErr, replyErr)
}

// Delete implements driver.Store: one DEL per key, pipelined (keys of
// different slots cannot share a command on a cluster).
func (s *Store) Delete(ctx context.Context, keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	pipe := s.client.Pipeline()
	cmds := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Del(ctx, k)
	}
	_, _ = pipe.Exec(ctx)
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return fmt.Errorf("redisstore: delete: %w", err)
		}
	}
	return nil
}

// Ping reports whether the store can decide: PING on a standalone or
// Sentinel client, PING to every primary on a cluster.
func (s *Store) Ping(ctx context.Context) error {
	if c, ok := s.client.(*redis.ClusterClient); ok {
		return c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			return n.Ping(ctx).Err()
		})
	}
	return s.client.Ping(ctx).Err()
}

// Penalties implements driver.Penalizer: the scripts valkeystore runs keep
// the key's penalty state under its penalty key, in the key's slot.
func (s *Store) Penalties() bool { return true }
