package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/luascript"
)

// Reservations (driver.Reserver), with valkeystore's scripts: one script
// call per reservation or settle, of its key and its record (in the key's
// slot), all of a batch in one pipeline (split by node on a cluster),
// within the earliest deadline; EVAL follows NOSCRIPT. A call is never
// retried after a timeout; a settle is safe to send again (it counts once).

// An rcall is one reservation's or settle's script call.
type rcall struct {
	skip bool
	sc   *luascript.Script
	keys []string
	args []string
}

func (c *rcall) command(ctx context.Context, sha bool) scriptCmd {
	args := make([]any, 0, 3+len(c.keys)+len(c.args))
	if sha {
		args = append(args, "evalsha", c.sc.SHA)
	} else {
		args = append(args, "eval", c.sc.Src)
	}
	args = append(args, len(c.keys))
	for _, k := range c.keys {
		args = append(args, k)
	}
	for _, a := range c.args {
		args = append(args, a)
	}
	return scriptCmd{redis.NewCmd(ctx, args...)}
}

// runCalls sends the calls not skipped, within dl, and passes each one's
// reply (its text, or its error) to done.
func (s *Store) runCalls(ctx context.Context, calls []rcall, dl time.Time, done func(i int, reply string, err error)) {
	s.runCallsRaw(ctx, calls, dl, done, nil)
}

// runCallsRaw is runCalls, passing a call that did not fail to raw instead
// of done, when raw is given.
func (s *Store) runCallsRaw(ctx context.Context, calls []rcall, dl time.Time, done func(i int, reply string, err error), raw func(i int, cmd scriptCmd)) {
	if !dl.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl)
		defer cancel()
	}
	var idx []int
	var cmds []scriptCmd
	for i := range calls {
		if !calls[i].skip {
			idx = append(idx, i)
			cmds = append(cmds, calls[i].command(ctx, true))
		}
	}
	if len(cmds) == 0 {
		return
	}
	if err := ctx.Err(); err != nil {
		for _, i := range idx {
			done(i, "", err)
		}
		return
	}
	s.run(ctx, cmds)
	var again []int
	for j := range cmds {
		if isNoScript(cmds[j].Err()) {
			again = append(again, j)
		}
	}
	if len(again) > 0 {
		re := make([]scriptCmd, len(again))
		for k, j := range again {
			re[k] = calls[idx[j]].command(ctx, false)
		}
		s.run(ctx, re)
		for k, j := range again {
			cmds[j] = re[k]
		}
	}
	for j, i := range idx {
		if err := cmds[j].Err(); err != nil {
			done(i, "", err)
			continue
		}
		if raw != nil {
			raw(i, cmds[j])
			continue
		}
		reply, err := cmds[j].Text()
		done(i, reply, err)
	}
}

// Reserve implements driver.Reserver.
func (s *Store) Reserve(ctx context.Context, batch []driver.ReserveOp) error {
	calls := make([]rcall, len(batch))
	var dl time.Time
	for i := range batch {
		op := &batch[i]
		sc := luascript.ReserveFor(&op.Rule)
		switch err := op.Validate(); {
		case err != nil:
			op.Err = err
		case op.PenaltyKey != "" || !op.Penalty.IsZero():
			op.Err = fmt.Errorf("redisstore: reservation of %q: a reservation takes no penalty", op.Key)
		case op.Cost < 0 || op.Record == "" || op.Life < time.Millisecond || op.Life%time.Millisecond != 0:
			op.Err = fmt.Errorf("redisstore: reservation of %q: record %q, life %v, estimate %d", op.Key, op.Record, op.Life, op.Cost)
		case sc == nil:
			op.Err = fmt.Errorf("redisstore: %v keeps no reservations", op.Rule.Algorithm)
		}
		if op.Err != nil {
			calls[i].skip = true
			continue
		}
		if d := op.Deadline; !d.IsZero() && (dl.IsZero() || d.Before(dl)) {
			dl = d
		}
		keys, ovIdx, recIdx := luascript.ReserveKeys(op)
		args := luascript.AppendArgs(nil, &op.Op, ovIdx, 0, time.Now())
		calls[i] = rcall{sc: sc, keys: keys, args: []string{string(args), string(luascript.AppendReserveArgs(nil, op, recIdx))}}
	}
	s.runCalls(ctx, calls, dl, func(i int, reply string, err error) {
		op := &batch[i]
		ops := []driver.Op{op.Op}
		luascript.FillCall(ops, []int{0}, "redisstore", op.Rule.Algorithm, reply, err, nil)
		op.Op = ops[0]
	})
	return nil
}

// Settle implements driver.Reserver.
func (s *Store) Settle(ctx context.Context, batch []driver.SettleOp) error {
	calls := make([]rcall, len(batch))
	var dl time.Time
	for i := range batch {
		op := &batch[i]
		switch err := (&driver.Op{Rule: op.Rule, Now: op.Now}).Validate(); {
		case err != nil:
			op.Err = err
		case op.Actual < 0 || op.Actual > driver.MaxSettle || op.MaxDebt < 0 || op.Record == "":
			op.Err = fmt.Errorf("redisstore: settle of %q: actual %d, max debt %d, record %q", op.Key, op.Actual, op.MaxDebt, op.Record)
		case luascript.ReserveFor(&op.Rule) == nil:
			op.Err = fmt.Errorf("redisstore: %v keeps no reservations", op.Rule.Algorithm)
		}
		if op.Err != nil {
			calls[i].skip = true
			continue
		}
		if d := op.Deadline; !d.IsZero() && (dl.IsZero() || d.Before(dl)) {
			dl = d
		}
		keys, ovIdx := luascript.SettleKeys(op)
		args, split := luascript.AppendSettleArgs(nil, op, ovIdx, time.Now())
		calls[i] = rcall{sc: luascript.Settle, keys: keys, args: []string{string(args[:split]), string(args[split:])}}
	}
	s.runCalls(ctx, calls, dl, func(i int, reply string, err error) {
		op := &batch[i]
		if err != nil {
			op.Err = fmt.Errorf("redisstore: settle script: %w", err)
			return
		}
		op.Result, op.Err = luascript.DecodeSettle(reply)
		if op.Err != nil {
			op.Err = fmt.Errorf("redisstore: settle script: %w", op.Err)
		}
	})
	return nil
}
