package memstore

import (
	"context"
	"sort"

	"sync"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/luascript"
)

// Grants (driver.Granter): the Go twin of luascript/scripts/grant.lua,
// step for step, under one lock per store (a grant call is rare: that is
// its point).

// grantHolder is one holder's record: its units, its grant's end and until
// when it counts as seen, in microseconds.
type grantHolder struct{ g, end, seen int64 }

// grantState is a key's central grant state (see driver.Granter).
type grantState struct {
	level, at int64 // L0 (µs of credit, or a window's count) and its time (a window's first instant)
	// withheld is the refill a bucket's level did not get because of the
	// units counted as held (its cap tau − ΣG_h below tau), in µs of
	// credit: see GrantWithheld.
	withheld int64
	holders  map[driver.HolderID]*grantHolder
	expires  time.Time
}

type grantStates struct {
	mu     sync.Mutex
	m      map[string]*grantState
	writes int
}

// Grant implements driver.Granter.
func (s *Store) Grant(ctx context.Context, batch []driver.GrantOp) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for i := range batch {
		op := &batch[i]
		op.Result, op.Err = s.grant(op)
	}
	return nil
}

func (s *Store) grant(op *driver.GrantOp) (driver.GrantResult, error) {
	if err := op.Validate(); err != nil {
		return driver.GrantResult{}, err
	}
	g := &s.grants
	g.mu.Lock()
	defer g.mu.Unlock()
	clockNow := s.clock()
	now := clockNow
	if !op.Now.IsZero() {
		now = op.Now
	}
	us := now.UnixMicro()
	if g.m == nil {
		g.m = map[string]*grantState{}
	}
	st := g.m[op.Key]
	if st != nil && !clockNow.Before(st.expires) {
		st = nil
	}
	var res driver.GrantResult
	var ttl int64
	if op.Rule.Algorithm.Rated() {
		st, res, ttl = grantBucket(st, op, us)
	} else {
		start, end, ok := grantWindow(&op.Rule, us, now)
		if !ok {
			return driver.GrantResult{}, driver.ErrClockSkew
		}
		st, res, ttl = grantCount(st, op, us, start, end)
	}
	if op.Plain != "" {
		res.Mixed = s.exists(op.Plain, clockNow)
	}
	if ttl <= 0 {
		delete(g.m, op.Key)
	} else {
		st.expires = clockNow.Add(time.Duration((ttl+999)/1000)*time.Millisecond + driver.KeyTTLMargin)
		g.m[op.Key] = st
	}
	g.writes++
	if g.writes%sweepEvery == 0 {
		for k, v := range g.m {
			if !clockNow.Before(v.expires) {
				delete(g.m, k)
			}
		}
	}
	return res, nil
}

// exists reports whether key holds live plain state.
func (s *Store) exists(key string, now time.Time) bool {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	it := sh.m[key]
	return it != nil && now.Before(it.expires)
}

// grantWindow returns the window of a FixedWindow rule holding now, in
// microseconds; ok is false for calendar periods whose bounds (computed
// around the same time, as the script's are sent) do not hold it.
func grantWindow(r *driver.Rule, us int64, now time.Time) (start, end int64, ok bool) {
	if r.Calendar.IsZero() {
		w := r.Window.Microseconds()
		idx := floorDiv(us, w)
		return idx * w, (idx + 1) * w, true
	}
	b := luascript.CalendarBounds(r, now)
	for i := 0; i < 3; i++ {
		if b[i] <= us && us < b[i+1] {
			return b[i], b[i+1], true
		}
	}
	return 0, 0, false
}

// reap drops the units of the holders whose grant ended and the records of
// those unseen for a life and holding nothing; it returns ΣG_h and the
// holders seen (this op's holder included), and the op's holder's G after
// its report (min(Unspent, G_h)).
func reap(st *grantState, op *driver.GrantOp, now int64) (sum, seen, own int64) {
	for id, h := range st.holders {
		if h.end <= now {
			h.g = 0
		}
		if h.seen <= now && h.g == 0 {
			delete(st.holders, id)
			continue
		}
		if id == op.Holder {
			h.g = min(op.Unspent, h.g)
			own = h.g
		} else {
			seen++
		}
		sum += h.g
	}
	return sum, seen + 1, own
}

// refill refills a bucket's level to now, piecewise: up to each ended
// grant's end under the cap of every G_h counted until then, so that a
// report or a reap raises the cap from its own time on, never for the
// time before (the level would jump by time it never earned).
func refill(st *grantState, now, tau, iv int64) {
	if now <= st.at {
		return
	}
	var held int64
	var ends []*grantHolder
	for _, h := range st.holders {
		held += h.g
		if h.g > 0 && h.end < now {
			ends = append(ends, h)
		}
	}
	sort.Slice(ends, func(i, j int) bool { return ends[i].end < ends[j].end })
	for _, h := range ends {
		if h.end > st.at {
			st.level = refillTo(st, tau, held*iv, h.end-st.at)
			st.at = h.end
		}
		held -= h.g
	}
	st.level = refillTo(st, tau, held*iv, now-st.at)
	st.at = now
}

// refillTo is st's level refilled by d under the cap tau − held, counting
// in st.withheld what the cap below tau kept from it.
func refillTo(st *grantState, tau, held, d int64) int64 {
	free := min(tau, st.level+d)
	capped := min(tau-held, st.level+d)
	st.withheld += max(0, free-max(capped, st.level))
	return capped
}

// grantBucket is grant.lua's bucket: TokenBucket and GCRA.
func grantBucket(st *grantState, op *driver.GrantOp, now int64) (*grantState, driver.GrantResult, int64) {
	iv, b := op.Rule.Interval.Microseconds(), op.Rule.Limit
	tau := b * iv
	if st == nil {
		st = &grantState{level: tau, at: now, holders: map[driver.HolderID]*grantHolder{}}
	}
	refill(st, now, tau, iv)
	sum, n, g := reap(st, op, now)
	if op.Return {
		back := min(op.Unspent, g)
		g, sum, st.level = g-back, sum-back, st.level+back*iv
	}
	if op.Reset {
		st.level = tau - sum*iv
	}
	lim := max(0, min(op.Want, max(driver.GrantFair(b, n)-g, op.Need)))
	x := min(lim, st.level/iv)
	st.level -= x * iv
	g += x
	res := driver.GrantResult{Granted: x, Held: g, Holders: n, Level: st.level / iv}
	if x < lim {
		// Until the level holds the rest of what it would have granted
		// (the holder waits for its share, not for a unit), or half its
		// room below the cap, whichever comes first: the level must not
		// sit at the cap while holders wait, or its refill is lost.
		room := tau - (sum+x)*iv - st.level
		res.More = time.Duration(max(1, min((lim-x)*iv-st.level, room/2))) * time.Microsecond
	}
	end := setHolder(st, op, g, now, now+op.Life.Microseconds())
	if g > 0 {
		res.Left = time.Duration(end-now) * time.Microsecond
	}
	last := lastOf(st)
	if len(st.holders) == 0 && st.level >= tau {
		return st, res, 0
	}
	return st, res, max(0, last-now) + (tau - st.level)
}

// grantCount is grant.lua's window: FixedWindow over [start, end).
func grantCount(st *grantState, op *driver.GrantOp, now, start, end int64) (*grantState, driver.GrantResult, int64) {
	limit := op.Rule.Limit
	if st == nil {
		st = &grantState{at: start, holders: map[driver.HolderID]*grantHolder{}}
	}
	if st.at != start {
		st.level, st.at = 0, start
		for _, h := range st.holders {
			h.g = 0
		}
	}
	sum, n, g := reap(st, op, now)
	if op.Return {
		back := min(op.Unspent, g)
		g, st.level = g-back, max(0, st.level-back)
	}
	if op.Reset {
		st.level = sum
	}
	lim := max(0, min(op.Want, max(driver.GrantFair(limit, n)-g, op.Need)))
	x := min(lim, limit-st.level)
	st.level += x
	g += x
	res := driver.GrantResult{Granted: x, Held: g, Holders: n, Level: limit - st.level}
	if x < lim {
		res.More = time.Duration(end-now) * time.Microsecond
	}
	e := setHolder(st, op, g, now, min(end, now+op.Life.Microseconds()))
	if g > 0 {
		res.Left = time.Duration(e-now) * time.Microsecond
	}
	if len(st.holders) == 0 && st.level == 0 {
		return st, res, 0
	}
	return st, res, max(end, lastOf(st)) - now
}

// setHolder writes the op's holder's record (deleting it after a
// give-back that left it nothing) and returns its grant's end.
func setHolder(st *grantState, op *driver.GrantOp, g, now, end int64) int64 {
	if op.Return && g == 0 {
		delete(st.holders, op.Holder)
		return now
	}
	st.holders[op.Holder] = &grantHolder{g: g, end: end, seen: now + op.Life.Microseconds()}
	return end
}

// lastOf is the latest end or seen time of the holders (0 for none).
func lastOf(st *grantState) int64 {
	var last int64
	for _, h := range st.holders {
		last = max(last, h.end, h.seen)
	}
	return last
}

// GrantWithheld returns the refill key's bucket level did not get, in
// units, because of the units counted as held by its holders since the
// key's grant state began: the level's cap is the burst less those units,
// and while the level sits at that cap, refill that an exact bucket at
// the same level would have taken is withheld. It is the term of the
// under-admission bound of grants that the holders' spent units not yet
// reported cause (docs/grants.md); 0 for a window, or when key holds no
// grant state.
func (s *Store) GrantWithheld(key string, rule driver.Rule) int64 {
	g := &s.grants
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.m[key]
	if st == nil || !rule.Algorithm.Rated() || rule.Interval <= 0 {
		return 0
	}
	iv := rule.Interval.Microseconds()
	refill(st, s.clock().UnixMicro(), rule.Limit*iv, iv) // what the next call would find
	return st.withheld / iv
}

// GrantHolders returns, for tests and inspection, the records of key's
// grant state: each holder's units, grant end and seen time (µs), and the
// level and its time; ok is false when the key holds none.
func (s *Store) GrantHolders(key string) (level, at int64, holders map[string][3]int64, ok bool) {
	g := &s.grants
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.m[key]
	if st == nil || !s.clock().Before(st.expires) {
		return 0, 0, nil, false
	}
	holders = map[string][3]int64{}
	for id, h := range st.holders {
		holders[id.String()] = [3]int64{h.g, h.end, h.seen}
	}
	return st.level, st.at, holders, true
}
