package sluicetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// RunInFlight runs the in-flight limit's tests: random timelines against an
// exact reference model, and the Limiter's lease semantics.
func RunInFlight(t *testing.T, h Harness) {
	t.Run("Timelines", func(t *testing.T) { RunInFlightTimelines(t, h) })
	t.Run("Limiter", func(t *testing.T) { RunInFlightLimiter(t, h) })
	t.Run("BadInput", func(t *testing.T) { RunInFlightBadInput(t, h) })
	t.Run("AllowAll", func(t *testing.T) { RunInFlightAllowAll(t, h) })
	t.Run("Expired", func(t *testing.T) { RunInFlightExpired(t, h) })
	t.Run("Concurrent", func(t *testing.T) { RunInFlightConcurrent(t, h) })
}

// RunInFlightExpired checks Result.Expired on a timeline: of two leases,
// the one whose Lease passed is counted by the next decision on the key,
// once; a released lease, and the leases of a key reset, are never counted.
func RunInFlightExpired(t *testing.T, h Harness) {
	const lease = 10 * time.Second
	l, clock := h.newInFlight(t, 3, lease)
	ctx := context.Background()
	do := func(what, key string, cost int64, id driver.LeaseID, allowed bool, expired int64) {
		t.Helper()
		batch := []driver.Op{{Key: storeKey(l, key), Rule: l.Rule(), Now: clock.Now(), Cost: cost, Lease: id}}
		if err := h.Store.Do(ctx, batch); err != nil || batch[0].Err != nil {
			t.Fatalf("%s: %v, %v", what, err, batch[0].Err)
		}
		if r := batch[0].Result; r.Allowed != allowed || r.Expired != expired {
			t.Fatalf("%s: allowed %v, expired %d; want %v, %d (%+v)", what, r.Allowed, r.Expired, allowed, expired, r)
		}
	}
	a, b, c := driver.LeaseID{1}, driver.LeaseID{2}, driver.LeaseID{3}
	do("acquire a", "k", 1, a, true, 0)
	clock.Advance(lease / 2)
	do("acquire b", "k", 1, b, true, 0)
	clock.Advance(lease / 2) // a ends now
	do("acquire c, a's Lease passed", "k", 1, c, true, 1)
	do("release b", "k", -1, b, true, 0)
	do("release a, already counted", "k", -1, a, false, 0)
	do("peek", "k", 0, driver.LeaseID{}, true, 0)
	clock.Advance(lease) // c ends
	do("release c, ended", "k", -1, c, false, 1)
	// A reset key's leases are gone, not expired.
	do("acquire r", "r", 1, a, true, 0)
	if err := l.Reset(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * lease)
	do("acquire after a reset", "r", 1, b, true, 0)
}

// leaseModel is the reference model of one in-flight key: the leases that
// exist, each with when it ends (microseconds). It shares no code with the
// stores: a lease exists while now < end; an acquire adds one while fewer
// than limit exist; a renewal of an existing lease moves its end to now +
// lease; a release removes an existing one. Every decision first counts,
// once, the leases whose end has come (Result.Expired) and forgets them.
type leaseModel struct {
	limit, lease int64
	ends         map[driver.LeaseID]int64
}

// live returns the ends of the leases that exist at now.
func (m *leaseModel) live(now int64) []int64 {
	var out []int64
	for _, e := range m.ends {
		if now < e {
			out = append(out, e)
		}
	}
	return out
}

func (m *leaseModel) exists(id driver.LeaseID, now int64) bool {
	e, ok := m.ends[id]
	return ok && now < e
}

// reap forgets the leases that ended at or before now, and returns how
// many.
func (m *leaseModel) reap(now int64) (n int64) {
	for id, e := range m.ends {
		if e <= now {
			n++
			delete(m.ends, id)
		}
	}
	return n
}

// want returns the Result and receipt the model gives op at now, and
// applies op.
func (m *leaseModel) want(op driver.Op, now int64) (driver.Result, int64) {
	expired := m.reap(now)
	allowed := false
	receipt := now
	switch {
	case op.Renew:
		if m.exists(op.Lease, now) {
			m.ends[op.Lease] = now + m.lease
			allowed, receipt = true, now+m.lease
		}
	case op.Cost == -1:
		if m.exists(op.Lease, now) {
			delete(m.ends, op.Lease)
			allowed = true
		}
	default:
		if int64(len(m.live(now))) < m.limit {
			allowed = true
			if op.Cost == 1 {
				m.ends[op.Lease] = now + m.lease
				receipt = now + m.lease
			}
		}
	}
	live := m.live(now)
	res := driver.Result{Allowed: allowed, Remaining: max(0, m.limit-int64(len(live))), Expired: expired}
	if !allowed && !op.Renew && op.Cost >= 0 {
		// The first instant at which fewer than limit leases exist.
		sort.Slice(live, func(i, j int) bool { return live[i] < live[j] })
		for _, t := range live {
			n := 0
			for _, e := range live {
				if t < e {
					n++
				}
			}
			if int64(n) < m.limit {
				res.RetryAfter = time.Duration(t-now) * time.Microsecond
				break
			}
		}
	}
	for _, e := range live {
		res.ResetAfter = max(res.ResetAfter, time.Duration(e-now)*time.Microsecond)
	}
	return res, receipt
}

// driftClock is a fake clock that runs at least as fast as the real one:
// Now is a fake start, plus the real time elapsed, plus the steps taken.
// Keys expire by the store's real clock; on this clock every lease of a key
// has ended by the time the key may have expired.
type driftClock struct {
	start, real time.Time
	offset      time.Duration
}

func newDriftClock() *driftClock { return &driftClock{start: Epoch, real: time.Now()} }

func (c *driftClock) now() time.Time {
	return c.start.Add(time.Since(c.real) + c.offset).Truncate(time.Microsecond)
}

func (c *driftClock) step(d time.Duration) { c.offset += d }

// to moves the clock to t when t is not before its time, and reports
// whether it did.
func (c *driftClock) to(t time.Time) bool {
	d := t.Sub(c.now())
	if d < 0 {
		return false
	}
	c.offset += d
	return true
}

// RunInFlightTimelines runs random timelines of acquires, renewals,
// releases (double ones, of ended leases, of another key's lease, forged)
// and peeks on a few in-flight keys, with steps down to a microsecond and
// steps to exactly a lease's end, and checks every Result and receipt
// against the reference model. Ops go one at a time and in batches of
// several keys.
func RunInFlightTimelines(t *testing.T, h Harness) {
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			tl := newLeaseTimeline(t, seed)
			ctx := context.Background()
			for step := 0; step < 300; step++ {
				tl.moveTime()
				now := tl.clock.now()
				batch, descs := tl.pickBatch(now)
				sent := time.Now()
				if err := h.Store.Do(ctx, batch); err != nil {
					t.Fatalf("step %d: Do: %v", step, err)
				}
				tl.check(t, step, now.UnixMicro(), batch, descs, sent)
			}
			h.CheckTTLs(t, tl.prefix, tl.rule)
		})
	}
}

// knownLease is a lease a timeline acquired, kept to renew and release.
type knownLease struct {
	key string
	id  driver.LeaseID
}

// leaseTimeline is one random timeline of RunInFlightTimelines: its
// random numbers, its keys with their reference models, the leases it
// acquired and its clock.
type leaseTimeline struct {
	rng    *rand.Rand
	rule   sluice.Rule
	lease  time.Duration
	prefix string
	keys   []string
	models map[string]*leaseModel
	known  []knownLease
	clock  *driftClock
	// kept is, per key, the earliest real time the store may expire the
	// key whole (its leases then counted by no decision): from before
	// the batch of its last write, its ResetAfter plus KeyTTLMargin.
	kept map[string]time.Time
}

// newLeaseTimeline draws the limit and lease of seed's timeline and sets
// up its three keys, each with an empty model.
func newLeaseTimeline(t *testing.T, seed uint64) *leaseTimeline {
	rng := rand.New(rand.NewPCG(seed, 26))
	limit := int64(1 + rng.IntN(4))
	lease := time.Duration(2_000_000+rng.IntN(2_000_000)) * time.Microsecond
	tl := &leaseTimeline{rng: rng, lease: lease, prefix: Prefix(t), models: map[string]*leaseModel{}, kept: map[string]time.Time{}}
	tl.rule = sluice.Rule{Algorithm: driver.AlgorithmInFlight, Limit: limit, Window: lease}
	for _, name := range []string{"a", "b", "c"} {
		tl.keys = append(tl.keys, driver.Key(tl.prefix, "if", tl.rule, name))
	}
	for _, k := range tl.keys {
		tl.models[k] = &leaseModel{limit: limit, lease: lease.Microseconds(), ends: map[driver.LeaseID]int64{}}
	}
	tl.clock = newDriftClock()
	return tl
}

// randomID returns a random (forged) lease id.
func (tl *leaseTimeline) randomID() driver.LeaseID {
	var id driver.LeaseID
	for i := range id {
		id[i] = byte(tl.rng.IntN(256))
	}
	return id
}

// pickID returns a lease id to renew or release on key: mostly a known
// lease (of key or of another), else a forged one; and which it is.
func (tl *leaseTimeline) pickID(key string) (driver.LeaseID, string) {
	switch r := tl.rng.IntN(10); {
	case r < 7 && len(tl.known) > 0:
		k := tl.known[tl.rng.IntN(len(tl.known))]
		if k.key != key {
			return k.id, "another key's"
		}
		return k.id, "known"
	default:
		return tl.randomID(), "forged"
	}
}

// pickOp returns a random Op for key, and what it is.
func (tl *leaseTimeline) pickOp(key string) (driver.Op, string) {
	op := driver.Op{Key: key, Rule: tl.rule}
	switch r := tl.rng.IntN(100); {
	case r < 40:
		op.Cost, op.Lease = 1, tl.randomID()
		return op, "acquire"
	case r < 60:
		id, what := tl.pickID(key)
		op.Renew, op.Lease = true, id
		return op, "renew " + what
	case r < 90:
		id, what := tl.pickID(key)
		op.Cost, op.Lease = -1, id
		return op, "release " + what
	default:
		return op, "peek"
	}
}

// moveTime moves the clock: not at all, a microsecond, a little, or to
// exactly the end of a known lease (or just before it).
func (tl *leaseTimeline) moveTime() {
	switch r := tl.rng.IntN(10); {
	case r < 2:
	case r < 4:
		tl.clock.step(time.Microsecond)
	case r < 7:
		tl.clock.step(time.Duration(tl.rng.Int64N(tl.lease.Microseconds()/3)) * time.Microsecond)
	default:
		var ends []int64
		for _, m := range tl.models {
			for _, e := range m.ends {
				ends = append(ends, e)
			}
		}
		if len(ends) > 0 {
			e := ends[tl.rng.IntN(len(ends))] - int64(tl.rng.IntN(2))
			tl.clock.to(time.UnixMicro(e))
		}
	}
}

// pickBatch returns the ops of one step at now: one key's, or (a quarter
// of the time) every key's in a random order; and what each is.
func (tl *leaseTimeline) pickBatch(now time.Time) ([]driver.Op, []string) {
	n := 1
	if tl.rng.IntN(4) == 0 {
		n = len(tl.keys)
	}
	perm := tl.rng.Perm(len(tl.keys))[:n]
	batch := make([]driver.Op, n)
	descs := make([]string, n)
	for j, ki := range perm {
		batch[j], descs[j] = tl.pickOp(tl.keys[ki])
		batch[j].Now = now
	}
	return batch, descs
}

// check checks each op of a batch done at us (sent at real time sent)
// against its key's model, and keeps the leases acquired. The leases
// reaped as expired are the model's, unless the store may have expired
// the key whole (every lease of it had ended: see driftClock) since its
// last write: then none.
func (tl *leaseTimeline) check(t *testing.T, step int, us int64, batch []driver.Op, descs []string, sent time.Time) {
	t.Helper()
	done := time.Now()
	for j := range batch {
		op := batch[j]
		if op.Err != nil {
			t.Fatalf("step %d: %s: %v", step, descs[j], op.Err)
		}
		want, receipt := tl.models[op.Key].want(op, us)
		if op.Result.Expired == 0 && !done.Before(tl.kept[op.Key]) {
			want.Expired = 0
		}
		if op.Result.Allowed && (op.Cost != 0 || op.Renew) {
			tl.kept[op.Key] = sent.Add(op.Result.ResetAfter + driver.KeyTTLMargin)
		}
		if op.Result != want || op.Receipt != receipt {
			t.Fatalf("step %d at +%dµs, %s on %s:\n got %+v receipt %d\nwant %+v receipt %d",
				step, us-Epoch.UnixMicro(), descs[j], op.Key, op.Result, op.Receipt, want, receipt)
		}
		if op.Cost == 1 && op.Result.Allowed {
			tl.known = append(tl.known, knownLease{op.Key, op.Lease})
		}
	}
}

// newInFlight returns an in-flight limiter of limit and lease on h.Store
// under a fake clock.
func (h Harness) newInFlight(t *testing.T, limit int64, lease time.Duration, opts ...sluice.Option) (*sluice.Limiter, *Clock) {
	t.Helper()
	clock := NewClock()
	l := h.NewLimiter(t, sluice.InFlight{Limit: limit, Lease: lease}, append([]sluice.Option{sluice.WithClock(clock.Now)}, opts...)...)
	return l, clock
}

func acquire(t *testing.T, l *sluice.Limiter, key string, want sluice.Result) *sluice.Lease {
	t.Helper()
	ls, res, err := l.Acquire(context.Background(), key)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	want.Limit = l.Rule().Limit
	if res != want {
		t.Fatalf("Acquire(%q):\n got %+v\nwant %+v", key, res, want)
	}
	if (ls != nil) != res.Allowed {
		t.Fatalf("Acquire(%q): lease %v with allowed %v", key, ls, res.Allowed)
	}
	return ls
}

func release(t *testing.T, ls *sluice.Lease, want bool) {
	t.Helper()
	got, err := ls.Release(context.Background())
	if err != nil || got != want {
		t.Fatalf("Release of a lease of %q: %v, %v; want %v, nil", ls.Key(), got, err, want)
	}
}

// RunInFlightLimiter checks the Limiter's lease semantics on h.Store: at
// most Limit at once, RetryAfter the earliest end, a lease ending exactly
// Lease after its acquire or renewal, Renew of an ended lease failing with
// ErrLeaseLost and taking no slot, Release idempotent and working on a
// canceled context, and rate decisions refused.
func RunInFlightLimiter(t *testing.T, h Harness) {
	const lease = 10 * time.Second
	l, clock := h.newInFlight(t, 3, lease)
	a, c, d := checkInFlightFull(t, l, clock, lease)
	checkInFlightEnds(t, l, clock, lease, a, c, d)
	checkInFlightByID(t, l, a)
	checkInFlightWrongKind(t, h, l, a.ID())
	checkInFlightEmptied(t, h, l, lease)
}

// checkInFlightFull fills key "k" of l (limit 3) a second apart, checks
// the refusal's RetryAfter and that a release frees a slot at once; it
// returns the first and third leases and the one taken after the release.
func checkInFlightFull(t *testing.T, l *sluice.Limiter, clock *Clock, lease time.Duration) (a, c, d *sluice.Lease) {
	t.Helper()
	a = acquire(t, l, "k", sluice.Result{Allowed: true, Remaining: 2, ResetAfter: lease})
	clock.Advance(time.Second)
	b := acquire(t, l, "k", sluice.Result{Allowed: true, Remaining: 1, ResetAfter: lease})
	clock.Advance(time.Second)
	c = acquire(t, l, "k", sluice.Result{Allowed: true, Remaining: 0, ResetAfter: lease})
	clock.Advance(time.Second)
	// Refused: the earliest lease (a) ends 7s from now, the latest 9s.
	acquire(t, l, "k", sluice.Result{Remaining: 0, RetryAfter: 7 * time.Second, ResetAfter: 9 * time.Second})
	if res, err := l.Peek(context.Background(), "k"); err != nil || res.Allowed || res.RetryAfter != 7*time.Second {
		t.Fatalf("Peek of a full key: %+v, %v", res, err)
	}
	// A release frees a slot at once, sooner than RetryAfter said.
	release(t, b, true)
	release(t, b, false) // idempotent
	d = acquire(t, l, "k", sluice.Result{Allowed: true, Remaining: 0, ResetAfter: lease})
	return a, c, d
}

// checkInFlightEnds checks that renewing a moves its end, that c ends at
// exactly Lease after its acquire and its failed renewal takes no slot,
// and that d's release works on a canceled context.
func checkInFlightEnds(t *testing.T, l *sluice.Limiter, clock *Clock, lease time.Duration, a, c, d *sluice.Lease) {
	t.Helper()
	ctx := context.Background()
	// Renewing a moves its end to 10s from now.
	clock.Advance(6 * time.Second) // a ends in 1s
	if err := a.Renew(ctx); err != nil {
		t.Fatalf("Renew of a live lease: %v", err)
	}
	// c ends at exactly Lease after its acquire: ended at that instant.
	clock.Set(2*time.Second + lease)
	if err := c.Renew(ctx); !errors.Is(err, sluice.ErrLeaseLost) {
		t.Fatalf("Renew at exactly the end of a lease: %v, want ErrLeaseLost", err)
	}
	release(t, c, false) // ended: nothing freed, no error
	// c's renewal took no slot: a, d hold two, one is free.
	acquire(t, l, "k", sluice.Result{Allowed: true, Remaining: 0, ResetAfter: lease})
	// A release on a canceled context still releases.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if ok, err := d.Release(cctx); !ok || err != nil {
		t.Fatalf("Release on a canceled context: %v, %v", ok, err)
	}
}

// checkInFlightByID checks that a lease kept by its id (as a client does)
// renews and releases, and that a is lost after.
func checkInFlightByID(t *testing.T, l *sluice.Limiter, a *sluice.Lease) {
	t.Helper()
	ctx := context.Background()
	back, err := l.Lease("k", a.ID())
	if err != nil {
		t.Fatal(err)
	}
	if err := back.Renew(ctx); err != nil {
		t.Fatalf("Renew by id: %v", err)
	}
	release(t, back, true)
	release(t, a, false)
	if err := a.Renew(ctx); !errors.Is(err, sluice.ErrLeaseLost) {
		t.Fatalf("Renew of a released lease: %v, want ErrLeaseLost", err)
	}
}

// checkInFlightWrongKind checks that rate decisions are refused on the
// in-flight limiter l, and lease decisions on a rate limiter.
func checkInFlightWrongKind(t *testing.T, h Harness, l *sluice.Limiter, id string) {
	t.Helper()
	ctx := context.Background()
	if _, err := l.Allow(ctx, "k"); !errors.Is(err, sluice.ErrWrongKind) {
		t.Fatalf("Allow on an in-flight limiter: %v, want ErrWrongKind", err)
	}
	if err := l.Wait(ctx, "k"); !errors.Is(err, sluice.ErrWrongKind) {
		t.Fatalf("Wait on an in-flight limiter: %v, want ErrWrongKind", err)
	}
	rate := h.NewLimiter(t, sluice.TokenBucket{Capacity: 1, Rate: 1, Per: time.Second})
	if _, _, err := rate.Acquire(ctx, "k"); !errors.Is(err, sluice.ErrWrongKind) {
		t.Fatalf("Acquire on a rate limiter: %v, want ErrWrongKind", err)
	}
	if _, err := rate.Lease("k", id); !errors.Is(err, sluice.ErrWrongKind) {
		t.Fatalf("Lease on a rate limiter: %v, want ErrWrongKind", err)
	}
}

// checkInFlightEmptied checks that a key emptied by releases is gone at
// once, and that Reset frees every slot of a key and loses its leases.
func checkInFlightEmptied(t *testing.T, h Harness, l *sluice.Limiter, lease time.Duration) {
	t.Helper()
	ctx := context.Background()
	e := acquire(t, l, "emptied", sluice.Result{Allowed: true, Remaining: 2, ResetAfter: lease})
	release(t, e, true)
	if h.TTLs != nil {
		if keys := h.TTLs(t, storeKey(l, "emptied")); len(keys) != 0 {
			t.Errorf("a key emptied by releases is still stored: %v", keys)
		}
	}
	x := acquire(t, l, "r", sluice.Result{Allowed: true, Remaining: 2, ResetAfter: lease})
	if err := l.Reset(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	if err := x.Renew(ctx); !errors.Is(err, sluice.ErrLeaseLost) {
		t.Fatalf("Renew after Reset: %v, want ErrLeaseLost", err)
	}
}

// RunInFlightBadInput: empty and huge keys, malformed and forged lease
// ids, and another key's lease: a clear error or a no-op, never another
// holder's slot.
func RunInFlightBadInput(t *testing.T, h Harness) {
	ctx := context.Background()
	l, _ := h.newInFlight(t, 1, 10*time.Second)
	if _, _, err := l.Acquire(ctx, ""); !errors.Is(err, sluice.ErrInvalidKey) {
		t.Fatalf("Acquire of an empty key: %v", err)
	}
	huge := strings.Repeat("x", 1<<16)
	hl := acquire(t, l, huge, sluice.Result{Allowed: true, Remaining: 0, ResetAfter: 10 * time.Second})
	acquire(t, l, huge, sluice.Result{Remaining: 0, RetryAfter: 10 * time.Second, ResetAfter: 10 * time.Second})
	release(t, hl, true)
	held := acquire(t, l, "victim", sluice.Result{Allowed: true, Remaining: 0, ResetAfter: 10 * time.Second})
	for _, id := range []string{"", "h", "x" + held.ID()[1:], held.ID() + "A", held.ID()[:22], "h!!!!!!!!!!!!!!!!!!!!!!", "hAAAAAAAAAAAAAAAAAAAAAA", "h" + strings.Repeat("A", 21) + "B"} {
		if _, err := l.Lease("victim", id); !errors.Is(err, sluice.ErrInvalidLease) {
			t.Errorf("Lease(%q): %v, want ErrInvalidLease", id, err)
		}
	}
	if _, err := l.Lease("", held.ID()); !errors.Is(err, sluice.ErrInvalidKey) {
		t.Errorf("Lease of an empty key: %v", err)
	}
	// A well-formed id that names no lease of the key: the victim's id
	// under another key, and a forged one.
	other, err := l.Lease("other", held.ID())
	if err != nil {
		t.Fatal(err)
	}
	release(t, other, false)
	if err := other.Renew(ctx); !errors.Is(err, sluice.ErrLeaseLost) {
		t.Fatalf("Renew of another key's lease: %v", err)
	}
	forgedID := []byte(held.ID())
	if forgedID[5] == 'A' {
		forgedID[5] = 'B'
	} else {
		forgedID[5] = 'A'
	}
	forged, err := l.Lease("victim", string(forgedID))
	if err != nil {
		t.Fatal(err)
	}
	release(t, forged, false)
	if err := forged.Renew(ctx); !errors.Is(err, sluice.ErrLeaseLost) {
		t.Fatalf("Renew of a forged lease: %v", err)
	}
	// The victim still holds its slot.
	acquire(t, l, "victim", sluice.Result{Remaining: 0, RetryAfter: 10 * time.Second, ResetAfter: 10 * time.Second})
	release(t, held, true)
}

// RunInFlightAllowAll checks a lease together with a rate limit: a
// refusal by either takes nothing from the other.
func RunInFlightAllowAll(t *testing.T, h Harness) {
	ctx := context.Background()
	l, clock := h.newInFlight(t, 1, 10*time.Second)
	rate := h.NewLimiter(t, sluice.FixedWindow{Limit: 2, Window: time.Hour}, sluice.WithClock(clock.Now))
	checks := []sluice.Check{{Limiter: l, Key: "k", Cost: 1}, {Limiter: rate, Key: "k", Cost: 1}}
	d, err := sluice.AllowAll(ctx, checks)
	if err != nil || !d.Allowed || len(d.Leases) != 2 || d.Leases[0] == nil || d.Leases[1] != nil {
		t.Fatalf("AllowAll: %+v, %v", d, err)
	}
	first := d.Leases[0]
	// The lease refuses: the rate limit keeps its unit.
	d, err = sluice.AllowAll(ctx, checks)
	if err != nil || d.Allowed || d.Leases != nil || d.Results[0].Allowed || !d.Results[1].Allowed {
		t.Fatalf("AllowAll with the lease taken: %+v, %v", d, err)
	}
	if res, _ := rate.Peek(ctx, "k"); res.Remaining != 1 {
		t.Fatalf("the rate limit after a refused lease: %+v, want 1 remaining", res)
	}
	release(t, first, true)
	// The rate limit's last unit, then the rate limit refuses: the lease
	// it took is released.
	d, err = sluice.AllowAll(ctx, checks)
	if err != nil || !d.Allowed {
		t.Fatalf("AllowAll: %+v, %v", d, err)
	}
	release(t, d.Leases[0], true)
	d, err = sluice.AllowAll(ctx, checks)
	if err != nil || d.Allowed || !d.Results[0].Allowed || d.Results[1].Allowed {
		t.Fatalf("AllowAll with the rate limit spent: %+v, %v", d, err)
	}
	if d.Results[0].Remaining != 1 {
		t.Errorf("the lease's Result after its release: %+v, want 1 remaining", d.Results[0])
	}
	if res, _ := l.Peek(ctx, "k"); !res.Allowed || res.Remaining != 1 {
		t.Fatalf("the in-flight key after a refused rate limit: %+v, want its slot free", res)
	}
	if _, err := sluice.AllowEach(ctx, checks); !errors.Is(err, sluice.ErrWrongKind) {
		t.Fatalf("AllowEach with a lease: %v, want ErrWrongKind", err)
	}
	if _, err := sluice.AllowAll(ctx, []sluice.Check{{Limiter: l, Key: "k", Cost: 2}}); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Fatalf("AllowAll with a lease of cost 2: %v, want ErrInvalidCost", err)
	}
}

// RunInFlightConcurrent checks that twice the limit of goroutines taking
// and releasing leases of one key never hold more than the limit at once,
// by the holders' own clocks (a store that reads and writes in two steps
// lets two holders take one slot), and that the slots are taken again.
func RunInFlightConcurrent(t *testing.T, h Harness) {
	const limit = 3
	l, _ := h.newInFlight(t, limit, time.Hour) // the clock stands still: no lease ends by time
	stop := make(chan struct{})
	time.AfterFunc(300*time.Millisecond, func() { close(stop) })
	maxAt, taken, err := HoldAtOnce(l, "k", 2*limit, 5*time.Millisecond, stop)
	if err != nil {
		t.Fatal(err)
	}
	if maxAt > limit {
		t.Errorf("%d leases held at once, limit %d", maxAt, limit)
	}
	if taken < 2*limit {
		t.Errorf("%d leases taken in 300ms by %d holders: freed slots are not taken again", taken, 2*limit)
	}
	if res, err := l.Peek(context.Background(), "k"); err != nil || res.Remaining != limit {
		t.Errorf("after every holder released: %+v, %v; want %d free", res, err, limit)
	}
}

// HoldAtOnce runs workers goroutines that each take leases of key on l
// for random durations until stop, and records when each holder held
// one by its own clock; it returns the most leases held at once by those
// timestamps and the number of leases taken.
func HoldAtOnce(l *sluice.Limiter, key string, workers int, hold time.Duration, stop <-chan struct{}) (maxAt int, taken int, err error) {
	hs := &holdSpans{}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			hs.work(l, key, hold, stop, rand.New(rand.NewPCG(seed, 5)))
		}(uint64(w))
	}
	wg.Wait()
	return mostAtOnce(hs.spans), len(hs.spans), hs.first
}

// holdSpan is when one holder held a lease, by its own clock.
type holdSpan struct{ from, to time.Time }

// holdSpans collects the spans of HoldAtOnce's workers and their first
// error.
type holdSpans struct {
	mu    sync.Mutex
	spans []holdSpan
	first error
}

// fail records err unless an error came first.
func (hs *holdSpans) fail(err error) {
	hs.mu.Lock()
	if hs.first == nil {
		hs.first = err
	}
	hs.mu.Unlock()
}

// work takes leases of key on l and holds each for a random duration up
// to hold until stop, recording each span; it stops at an error or a
// degraded decision of Acquire.
func (hs *holdSpans) work(l *sluice.Limiter, key string, hold time.Duration, stop <-chan struct{}, rng *rand.Rand) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		ls, res, err := l.Acquire(context.Background(), key)
		if err != nil || res.Degraded {
			hs.fail(fmt.Errorf("acquire: %v (degraded %v)", err, res.Degraded))
			return
		}
		if ls == nil {
			time.Sleep(time.Millisecond)
			continue
		}
		from := time.Now()
		time.Sleep(time.Duration(rng.Int64N(int64(hold))))
		to := time.Now()
		if _, err := ls.Release(context.Background()); err != nil {
			hs.fail(err)
		}
		hs.mu.Lock()
		hs.spans = append(hs.spans, holdSpan{from, to})
		hs.mu.Unlock()
	}
}

// mostAtOnce returns the most spans that overlap at one instant.
func mostAtOnce(spans []holdSpan) (maxAt int) {
	type ev struct {
		t time.Time
		d int
	}
	var evs []ev
	for _, s := range spans {
		evs = append(evs, ev{s.from, 1}, ev{s.to, -1})
	}
	// Ends before starts at one instant: a holder's end was recorded
	// before its release, and a start after the acquire.
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].t.Equal(evs[j].t) {
			return evs[i].d < evs[j].d
		}
		return evs[i].t.Before(evs[j].t)
	})
	cur := 0
	for _, e := range evs {
		cur += e.d
		maxAt = max(maxAt, cur)
	}
	return maxAt
}
