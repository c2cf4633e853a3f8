package memstore

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// Penalties (driver.Penalizer): the Go twin of luascript/scripts/penalty.lua.
// A key's penalty state lives in its shard's pen map, under its penalty
// key, which shares the decision key's hash tag and so its shard (as it
// shares its slot on a Valkey Cluster): a decision reads and writes both
// under one lock.

// penState is what a penalty key holds (see penalty.lua): the refusal
// window's start and count, the last block's end and the level.
type penState struct {
	ws, c, until, level int64
	expires             time.Time
}

// Penalties implements driver.Penalizer.
func (s *Store) Penalties() bool { return true }

// penalty returns the live penalty state of key (the zero state when
// there is none: an expired one is deleted). The caller holds sh.mu.
func (sh *shard) penalty(key string, clockNow time.Time) penState {
	st, ok := sh.pen[key]
	if ok && !clockNow.Before(st.expires) {
		delete(sh.pen, key)
		return penState{}
	}
	return st
}

// penaltyUntil returns the end of key's block, when later than now
// (microseconds); else 0. The caller holds sh.mu.
func (sh *shard) penaltyUntil(key string, now int64, clockNow time.Time) int64 {
	if u := sh.penalty(key, clockNow).until; u > now {
		return u
	}
	return 0
}

// penaltyRefused counts a refusal at now of a request of positive cost and
// returns the length of the block it starts (microseconds), or 0. The
// caller holds sh.mu.
func (sh *shard) penaltyRefused(key string, now int64, p *driver.Penalty, clockNow time.Time) int64 {
	st := sh.penalty(key, clockNow)
	within, forgive := p.Within.Microseconds(), p.Forgive.Microseconds()
	if st.c == 0 || now-st.ws >= within {
		st.ws, st.c = now, 0
	}
	st.c++
	var d int64
	if st.c >= p.After {
		if now-st.until >= forgive {
			st.level = 0 // forgiven, or never blocked
		}
		st.level++
		d = p.BlockAt(st.level).Microseconds()
		st.until, st.ws, st.c = now+d, 0, 0
	}
	keep := st.until + forgive
	if st.c > 0 {
		keep = max(keep, st.ws+within)
	}
	st.expires = clockNow.Add(time.Duration((keep-now+999)/1000)*time.Millisecond + driver.KeyTTLMargin)
	sh.pen[key] = st
	sh.writes++
	if sh.writes%sweepEvery == 0 {
		sh.sweep(clockNow)
	}
	return d
}

// checkOp refuses an Op a store cannot execute (Op.Validate), and one
// whose penalty key is not in its key's shard: its hash tag differs (on a
// cluster it would be in another slot).
func (s *Store) checkOp(op *driver.Op) error {
	if err := op.Validate(); err != nil {
		return err
	}
	if op.PenaltyKey != "" && hashTag(op.PenaltyKey) != hashTag(op.Key) {
		return fmt.Errorf("memstore: penalty key %q does not share the hash tag of key %q", op.PenaltyKey, op.Key)
	}
	return nil
}

// hashTag returns what a Valkey Cluster hashes of key: the part between
// the first '{' and the next '}' when not empty, else the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}
