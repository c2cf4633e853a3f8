package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/luascript"
)

// Grant implements driver.Granter: each GrantOp is one call of
// luascript.Grant, as valkeystore's, the calls of a batch pipelined.
func (s *Store) Grant(ctx context.Context, batch []driver.GrantOp) error {
	calls := make([]rcall, len(batch))
	var dl time.Time
	for i := range batch {
		op := &batch[i]
		if op.Err = op.Validate(); op.Err != nil {
			calls[i].skip = true
			continue
		}
		if d := op.Deadline; !d.IsZero() && (dl.IsZero() || d.Before(dl)) {
			dl = d
		}
		calls[i] = rcall{sc: luascript.Grant, keys: luascript.GrantKeys(op), args: luascript.GrantArgs(op, time.Now())}
	}
	s.runCallsRaw(ctx, calls, dl, func(i int, _ string, err error) {
		batch[i].Err = fmt.Errorf("redisstore: grant script: %w", err)
	}, func(i int, cmd scriptCmd) {
		op := &batch[i]
		v, err := cmd.Int64Slice()
		if err != nil {
			op.Err = fmt.Errorf("redisstore: grant script: unexpected reply: %w", err)
			return
		}
		op.Result, op.Err = luascript.DecodeGrant(op, v)
		if op.Err != nil {
			op.Err = fmt.Errorf("redisstore: grant script: %w", op.Err)
		}
	})
	return nil
}
