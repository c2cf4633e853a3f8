package sluicetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// Reservations (sluice.Limiter.Reserve and Settle) against an exact
// reference model: plain integer arithmetic, written from the documented
// semantics, sharing nothing with the stores.

var quiet = slog.New(slog.DiscardHandler)

// rsvModel is the reference model of one key under one rule.
type rsvModel struct {
	rule    sluice.Rule
	maxDebt int64
	// token bucket: credit in microseconds at time ts (has: state exists)
	has       bool
	credit    int64
	ts        int64
	tat       int64           // GCRA
	counts    map[int64]int64 // fixed window: count per window number
	resv      map[string]*modelRsv
	ledger    map[int64]int64 // fixed window: units attributed to each window
	violation string
}

type modelRsv struct {
	estimate, at int64
	settled      bool
}

func newRsvModel(rule sluice.Rule, maxDebt int64) *rsvModel {
	return &rsvModel{rule: rule, maxDebt: maxDebt, counts: map[int64]int64{}, resv: map[string]*modelRsv{}, ledger: map[int64]int64{}}
}

func (m *rsvModel) iv() int64 { return m.rule.Interval.Microseconds() }
func (m *rsvModel) w() int64  { return m.rule.Window.Microseconds() }

// window returns the number of now's window and its end.
func (m *rsvModel) window(now int64) (int64, int64) {
	w := m.w()
	idx := now / w // times in the tests are positive
	return idx, (idx + 1) * w
}

// avail is the token bucket's credit at now.
func (m *rsvModel) avail(now int64) int64 {
	full := m.rule.Limit * m.iv()
	if !m.has {
		return full
	}
	return min(full, m.credit+max(0, now-m.ts))
}

// take decides a take of cost (0 peeks) as AllowN does.
func (m *rsvModel) take(now, cost int64) sluice.Result {
	L := m.rule.Limit
	var r sluice.Result
	r.Limit = L
	switch m.rule.Algorithm {
	case driver.AlgorithmTokenBucket:
		iv, full := m.iv(), L*m.iv()
		c := m.avail(now)
		need := max(cost, 1) * iv
		if c >= need {
			r.Allowed = true
			if cost > 0 {
				c -= cost * iv
				m.credit, m.ts, m.has = c, now, c < full
			}
		} else {
			r.RetryAfter = us(need - c)
		}
		r.Remaining, r.ResetAfter = max(0, c)/iv, us(full-c)
	case driver.AlgorithmGCRA:
		iv, tau := m.iv(), L*m.iv()
		t := max(m.tat, now)
		next := t + max(cost, 1)*iv
		if next-tau <= now {
			r.Allowed = true
			if cost > 0 {
				t = next
				m.tat = t
			}
		} else {
			r.RetryAfter = us(next - tau - now)
		}
		r.Remaining, r.ResetAfter = max(0, now-t+tau)/iv, us(t-now)
	default:
		idx, end := m.window(now)
		c := m.counts[idx]
		if c+max(cost, 1) <= L {
			r.Allowed = true
			c += cost
			m.ledger[idx] += cost
		} else {
			r.RetryAfter = us(end - now)
			if m.rule.CountRejected && cost > 0 {
				c += cost
				m.ledger[idx] += cost
			}
		}
		m.counts[idx] = c
		r.Remaining = max(0, L-c)
		if c > 0 {
			r.ResetAfter = us(end - now)
		}
	}
	return r
}

func us(n int64) time.Duration { return time.Duration(n) * time.Microsecond }

// settle settles the reservation id with actual at now.
func (m *rsvModel) settle(now int64, id string, actual int64) (s sluice.Settlement, known bool) {
	rv := m.resv[id]
	if rv == nil {
		return s, false
	}
	s = sluice.Settlement{Actual: actual, Estimate: rv.estimate, Limit: m.rule.Limit}
	apply := !rv.settled
	s.Settled = apply
	rv.settled = true
	diff := rv.estimate - actual
	excess := max(0, -diff)
	switch m.rule.Algorithm {
	case driver.AlgorithmTokenBucket:
		m.settleBucket(now, apply, diff, excess, &s)
	case driver.AlgorithmGCRA:
		m.settleGCRA(now, apply, diff, excess, &s)
	default:
		m.settleWindow(now, rv, apply, diff, excess, &s)
	}
	if !apply {
		s.Charged = 0
	} else {
		s.Unpaid = excess - s.Charged
	}
	return s, true
}

// settleBucket is settle on a token bucket: the difference diff (estimate
// less actual) given back, or the excess charged in whole units while the
// credit stays at or above -maxDebt; apply is false for a second settle.
func (m *rsvModel) settleBucket(now int64, apply bool, diff, excess int64, s *sluice.Settlement) {
	iv, full := m.iv(), m.rule.Limit*m.iv()
	c := m.avail(now)
	if apply && diff != 0 {
		before := c
		if diff > 0 {
			c = min(full, c+diff*iv)
			if c-before > diff*iv {
				m.violation = "gave back more than the difference"
			}
		} else {
			// Whole units while the credit stays at or above -maxDebt.
			for s.Charged < excess && c-iv >= -m.maxDebt*iv {
				c -= iv
				s.Charged++
			}
		}
		m.credit, m.ts, m.has = c, now, c < full
	}
	if c < -m.maxDebt*iv {
		m.violation = fmt.Sprintf("debt %dµs beyond the bound %d units", -c, m.maxDebt)
	}
	if c < iv {
		s.RetryAfter = us(iv - c)
	}
	if c < 0 {
		s.Debt = (-c + iv - 1) / iv
	}
	s.Remaining, s.ResetAfter = max(0, c)/iv, us(full-c)
}

// settleGCRA is settle on GCRA: the theoretical arrival time moves back
// by the difference (not before now), or on by the excess in whole units
// while the debt stays within maxDebt.
func (m *rsvModel) settleGCRA(now int64, apply bool, diff, excess int64, s *sluice.Settlement) {
	iv, tau := m.iv(), m.rule.Limit*m.iv()
	t := max(m.tat, now)
	if apply && diff != 0 {
		if diff > 0 {
			t = max(now, t-diff*iv)
		} else {
			for s.Charged < excess && t+iv <= now+tau+m.maxDebt*iv {
				t += iv
				s.Charged++
			}
		}
		m.tat = t
	}
	if t-now-tau > m.maxDebt*iv {
		m.violation = "GCRA debt beyond its bound"
	}
	if t-now > tau {
		s.Debt = (t - now - tau + iv - 1) / iv
	}
	s.Remaining, s.RetryAfter, s.ResetAfter = max(0, now-t+tau)/iv, us(max(0, t+iv-tau-now)), us(t-now)
}

// settleWindow is settle on a fixed window: the difference given back
// only within the reservation's window, the excess charged to the current
// one up to limit + maxDebt.
func (m *rsvModel) settleWindow(now int64, rv *modelRsv, apply bool, diff, excess int64, s *sluice.Settlement) {
	L := m.rule.Limit
	idx, end := m.window(now)
	c := m.counts[idx]
	if apply && diff > 0 {
		if from, _ := m.window(rv.at); from == idx {
			back := min(c, diff)
			c -= back
			m.ledger[idx] -= diff // the window's ledger: the actual replaces the estimate
		}
	}
	if apply && diff < 0 {
		s.Charged = min(excess, max(0, L+m.maxDebt-c))
		c += s.Charged
		m.ledger[idx] += s.Charged
	}
	m.counts[idx] = c
	if s.Charged > 0 && c > L+m.maxDebt {
		m.violation = "an excess charged beyond limit + max debt"
	}
	if c+1 > L {
		s.RetryAfter = us(end - now)
	}
	if c > 0 {
		s.ResetAfter = us(end - now)
	}
	s.Remaining, s.Debt = max(0, L-c), max(0, c-L)
}

// checkLedger: a window's count is what was charged in it: never less than
// the settled amounts (less what the debt bound left unpaid) plus the
// estimates of the reservations not settled.
func (m *rsvModel) checkLedger() string {
	if m.violation != "" {
		return m.violation
	}
	if m.rule.Algorithm != driver.AlgorithmFixedWindow {
		return ""
	}
	for idx, c := range m.counts {
		if l := m.ledger[idx]; c < l && c != 0 || c > l {
			return fmt.Sprintf("window %d: count %d, charged %d", idx, c, l)
		}
	}
	return ""
}

// ReserveRules are the rules RunReservations uses, one per algorithm that
// keeps reservations.
func randomReserveRule(rng *rand.Rand) sluice.Rule {
	limit := int64(1 + rng.IntN(12))
	window := time.Duration(1+rng.IntN(2000)) * time.Millisecond
	var p sluice.Policy
	switch rng.IntN(3) {
	case 0:
		p = sluice.FixedWindow{Limit: limit, Window: window, CountRejected: rng.IntN(4) == 0}
	case 1:
		p = ratedPolicy(rng, false, limit, window)
	default:
		p = ratedPolicy(rng, true, limit, window)
	}
	return mustRule(p)
}

// policyOf returns the policy of a rule built by randomReserveRule.
func policyOf(r sluice.Rule) sluice.Policy { return rulePolicy{r} }

type rulePolicy struct{ r sluice.Rule }

func (p rulePolicy) Rule() (sluice.Rule, error) { return p.r, nil }

// RunReservations runs random timelines of reservations (reserve, settle
// below, at and above the estimate, double settle, never settle, takes
// beside them, window edges, debt at its bound, microsecond steps) under a
// fake clock on h.Store, which must implement driver.Reserver, and on the
// reference model: every Result and Settlement must be identical, and the
// model's invariants hold (the debt bound; a window's count is what was
// charged in it).
func RunReservations(t *testing.T, h Harness, timelines int) {
	for seed := range timelines {
		tl := newRsvTimeline(t, h, seed)
		for step := range 120 {
			now := tl.clock.Now().UnixMicro()
			switch k := tl.rng.IntN(10); {
			case k < 3:
				tl.reserve(step, now)
			case k < 6 && len(tl.ids) > 0:
				tl.settle(step, now)
			case k < 7:
				tl.allow(step, now)
			default:
				tl.advance(step, now)
			}
			if v := tl.m.checkLedger(); v != "" {
				tl.fail("model invariant: %s", v)
			}
			if len(tl.log) > 30 {
				tl.log = tl.log[1:]
			}
		}
	}
}

// rsvTimeline is one random timeline of RunReservations: the limiter
// under test on its fake clock, the model beside it, the ids reserved and
// the last steps taken (for the failure message).
type rsvTimeline struct {
	t     *testing.T
	ctx   context.Context
	seed  int
	rng   *rand.Rand
	rule  sluice.Rule
	clock *Clock
	l     *sluice.Limiter
	m     *rsvModel
	ids   []string
	log   []string
}

// newRsvTimeline draws timeline seed's rule, debt bound and start time,
// and makes its limiter on h.Store and its model.
func newRsvTimeline(t *testing.T, h Harness, seed int) *rsvTimeline {
	rng := rand.New(rand.NewPCG(uint64(seed), 27))
	rule := randomReserveRule(rng)
	maxDebt := []int64{0, sluice.NoDebt, 1, int64(rng.IntN(30) + 1)}[rng.IntN(4)]
	clock := NewClock()
	clock.Advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
	l, err := sluice.New(h.Store, policyOf(rule), sluice.WithPrefix(Prefix(t)), sluice.WithName("r"), sluice.WithClock(clock.Now),
		sluice.WithTimeout(5*time.Second), sluice.WithDenyCache(false), sluice.WithLogger(quiet), sluice.WithReservations(sluice.ReserveOptions{MaxDebt: maxDebt}))
	if err != nil {
		t.Fatal(err)
	}
	return &rsvTimeline{t: t, ctx: context.Background(), seed: seed, rng: rng, rule: rule, clock: clock, l: l, m: newRsvModel(rule, l.MaxDebt())}
}

// fail stops the test with the timeline's seed, rule and last steps.
func (tl *rsvTimeline) fail(format string, args ...any) {
	tl.t.Helper()
	tl.t.Fatalf("seed %d, %v, max debt %d:\n%s\n%s", tl.seed, tl.rule, tl.l.MaxDebt(), joinLines(tl.log), fmt.Sprintf(format, args...))
}

// reserve reserves a random estimate on the store and the model.
func (tl *rsvTimeline) reserve(step int, now int64) {
	est := int64(tl.rng.IntN(int(tl.rule.Limit) + 1))
	r, err := tl.l.Reserve(tl.ctx, "k", est)
	if err != nil {
		tl.fail("reserve: %v", err)
	}
	want := tl.m.take(now, est)
	tl.log = append(tl.log, fmt.Sprintf("%d t=%d reserve %d: %+v", step, now, est, r.Result))
	if r.Result != want {
		tl.fail("reserve %d: store %+v, model %+v", est, r.Result, want)
	}
	if r.Allowed != (r.ID != "") {
		tl.fail("reserve %d: allowed %v with id %q", est, r.Allowed, r.ID)
	}
	if r.Allowed {
		tl.m.resv[r.ID] = &modelRsv{estimate: est, at: now}
		tl.ids = append(tl.ids, r.ID)
	}
}

// settle settles a random reservation (again, sometimes) at, below or
// above its estimate, beyond the debt bound too, on the store and the
// model.
func (tl *rsvTimeline) settle(step int, now int64) {
	id := tl.ids[tl.rng.IntN(len(tl.ids))]
	est := tl.m.resv[id].estimate
	var actual int64
	switch tl.rng.IntN(5) {
	case 0:
		actual = est
	case 1:
		actual = int64(tl.rng.IntN(int(est) + 1))
	case 2:
		actual = est + int64(tl.rng.IntN(4))
	case 3:
		actual = est + int64(tl.rng.IntN(40)) // beyond the debt bound
	default:
		actual = 0
	}
	s, err := tl.l.Settle(tl.ctx, "k", id, actual)
	if err != nil {
		tl.fail("settle: %v", err)
	}
	want, _ := tl.m.settle(now, id, actual)
	tl.log = append(tl.log, fmt.Sprintf("%d t=%d settle %s est %d actual %d: %+v", step, now, id[:4], est, actual, s))
	if s != want {
		tl.fail("settle %d of %d: store %+v\nmodel %+v", actual, est, s, want)
	}
}

// allow takes a random cost beside the reservations, on the store and
// the model.
func (tl *rsvTimeline) allow(step int, now int64) {
	cost := int64(tl.rng.IntN(int(tl.rule.Limit) + 1))
	r, err := tl.l.AllowN(tl.ctx, "k", cost)
	if err != nil {
		tl.fail("allow: %v", err)
	}
	want := tl.m.take(now, cost)
	tl.log = append(tl.log, fmt.Sprintf("%d t=%d allow %d: %+v", step, now, cost, r))
	if r != want {
		tl.fail("allow %d: store %+v, model %+v", cost, r, want)
	}
}

// advance lets time pass: to a window edge (or a microsecond short of
// it), a microsecond, or more.
func (tl *rsvTimeline) advance(step int, now int64) {
	var d time.Duration
	switch tl.rng.IntN(4) {
	case 0:
		if tl.rule.Algorithm == driver.AlgorithmFixedWindow {
			_, end := tl.m.window(now)
			d = us(end-now) - time.Duration(tl.rng.IntN(2))*time.Microsecond
		} else {
			d = tl.rule.Interval
		}
	case 1:
		d = time.Microsecond
	default:
		d = time.Duration(tl.rng.IntN(int(tl.rule.Period()/time.Microsecond)+1)) * time.Microsecond / 2
	}
	tl.clock.Advance(d)
	tl.log = append(tl.log, fmt.Sprintf("%d +%v", step, d))
}

func joinLines(l []string) string {
	s := ""
	for _, x := range l {
		s += x + "\n"
	}
	return s
}

// RunReservationInput checks bad input: a clear error, never a charge to
// anyone: negative or huge estimates and actuals, forged and malformed
// ids, another key's reservation, another limiter's, a limiter made without
// WithReservations, an algorithm that cannot settle exactly.
func RunReservationInput(t *testing.T, h Harness) {
	ctx := context.Background()
	clock := NewClock()
	prefix := Prefix(t)
	mk := func(name string, p sluice.Policy, opts ...sluice.Option) *sluice.Limiter {
		l, err := sluice.New(h.Store, p, append([]sluice.Option{sluice.WithPrefix(prefix), sluice.WithName(name), sluice.WithClock(clock.Now),
			sluice.WithTimeout(5 * time.Second), sluice.WithDenyCache(false)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	on := sluice.WithReservations(sluice.ReserveOptions{})
	a := mk("a", sluice.TokenBucket{Capacity: 10, Rate: 10, Per: time.Second}, on)
	b := mk("b", sluice.TokenBucket{Capacity: 10, Rate: 10, Per: time.Second}, on)
	off := mk("off", sluice.TokenBucket{Capacity: 10, Rate: 10, Per: time.Second})
	checkRefusals(t, []refusal{
		{"negative estimate", sluice.ErrInvalidCost, func() error { _, err := a.Reserve(ctx, "x", -1); return err }},
		{"estimate above the limit", sluice.ErrInvalidCost, func() error { _, err := a.Reserve(ctx, "x", 11); return err }},
		{"empty key", sluice.ErrInvalidKey, func() error { _, err := a.Reserve(ctx, "", 1); return err }},
		{"no reservations", sluice.ErrNoReservations, func() error { _, err := off.Reserve(ctx, "x", 1); return err }},
	})
	checkBadSettles(t, a, b, off)
	checkUnreservable(t, h, on)
}

// A refusal is one bad call of RunReservationInput and the error it must
// wrap.
type refusal struct {
	name string
	err  error
	fn   func() error
}

// checkRefusals calls each refusal's fn and checks its error.
func checkRefusals(t *testing.T, cases []refusal) {
	t.Helper()
	for _, c := range cases {
		if err := c.fn(); !errors.Is(err, c.err) {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
		}
	}
}

// checkBadSettles reserves 4 of a's x and y, then checks that bad settles
// (bad actuals, malformed, forged and others' ids, b's limiter, off's
// without reservations) are refused and charge or give back nothing, and
// that the real settle still works, once.
func checkBadSettles(t *testing.T, a, b, off *sluice.Limiter) {
	t.Helper()
	ctx := context.Background()
	r, err := a.Reserve(ctx, "x", 4)
	if err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	other, err := a.Reserve(ctx, "y", 4)
	if err != nil || !other.Allowed {
		t.Fatal(other, err)
	}
	forged := r.ID[:5] + "A" + r.ID[6:] // well-formed, but no reservation's
	if forged == r.ID {
		forged = r.ID[:5] + "B" + r.ID[6:]
	}
	checkRefusals(t, []refusal{
		{"negative actual", sluice.ErrInvalidCost, func() error { _, err := a.Settle(ctx, "x", r.ID, -1); return err }},
		{"huge actual", sluice.ErrInvalidCost, func() error { _, err := a.Settle(ctx, "x", r.ID, driver.MaxSettle+1); return err }},
		{"empty id", sluice.ErrInvalidReservation, func() error { _, err := a.Settle(ctx, "x", "", 1); return err }},
		{"malformed id", sluice.ErrInvalidReservation, func() error { _, err := a.Settle(ctx, "x", "not-an-id", 1); return err }},
		{"id with a bad character", sluice.ErrInvalidReservation, func() error { _, err := a.Settle(ctx, "x", "r"+r.ID[1:22]+"*", 1); return err }},
		{"forged id", sluice.ErrUnknownReservation, func() error { _, err := a.Settle(ctx, "x", forged, 9); return err }},
		{"another key's reservation", sluice.ErrUnknownReservation, func() error { _, err := a.Settle(ctx, "x", other.ID, 9); return err }},
		{"another limiter's reservation", sluice.ErrUnknownReservation, func() error { _, err := b.Settle(ctx, "x", r.ID, 9); return err }},
		{"settle on a limiter without reservations", sluice.ErrNoReservations, func() error { _, err := off.Settle(ctx, "x", r.ID, 1); return err }},
	})
	// Nothing was charged or given back by any of them: x and y still
	// have 6 each, b's x all 10.
	for _, c := range []struct {
		l    *sluice.Limiter
		key  string
		want int64
	}{{a, "x", 6}, {a, "y", 6}, {b, "x", 10}} {
		if res, err := c.l.Peek(ctx, c.key); err != nil || res.Remaining != c.want {
			t.Errorf("%s %s after bad settles: %+v %v, want remaining %d", c.l.Name(), c.key, res, err, c.want)
		}
	}
	// The real settle still works, once.
	if s, err := a.Settle(ctx, "x", r.ID, 1); err != nil || !s.Settled || s.Remaining != 9 {
		t.Errorf("settle: %+v %v, want settled with 9 remaining", s, err)
	}
	if s, err := a.Settle(ctx, "x", r.ID, 1); err != nil || s.Settled || s.Remaining != 9 {
		t.Errorf("second settle: %+v %v, want not settled, 9 remaining", s, err)
	}
}

// checkUnreservable checks that New refuses reservations (on) for an
// algorithm that cannot settle exactly, with the reason, and a negative
// MaxDebt other than NoDebt.
func checkUnreservable(t *testing.T, h Harness, on sluice.Option) {
	t.Helper()
	for _, p := range []sluice.Policy{sluice.SlidingLog{Limit: 5, Window: time.Second}, sluice.SlidingWindow{Limit: 5, Window: time.Second}} {
		_, err := sluice.New(h.Store, p, on)
		if !errors.Is(err, sluice.ErrInvalidPolicy) || !containsAll(sluice.Reason(err), "cannot settle exactly") {
			t.Errorf("%T WithReservations: %v, want refused with the reason", p, err)
		}
	}
	if _, err := sluice.New(h.Store, sluice.TokenBucket{Capacity: 10, Rate: 10, Per: time.Second}, sluice.WithReservations(sluice.ReserveOptions{MaxDebt: -5})); !errors.Is(err, sluice.ErrInvalidPolicy) {
		t.Errorf("MaxDebt -5: %v, want refused", err)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// RunReservationCalendar: a daily quota (calendar periods) settles as a
// fixed window does: below the estimate within the day gives back, a
// settle after the day's end gives nothing back to the new day, and an
// excess settled then is charged to the new day.
func RunReservationCalendar(t *testing.T, h Harness) {
	ctx := context.Background()
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	clock := NewClockAt(time.Date(2026, 3, 8, 22, 0, 0, 0, la))
	l, err := sluice.New(h.Store, sluice.FixedWindow{Limit: 100, Calendar: sluice.Calendar{Unit: sluice.Day, Zone: la}},
		sluice.WithPrefix(Prefix(t)), sluice.WithClock(clock.Now), sluice.WithTimeout(5*time.Second), sluice.WithDenyCache(false),
		sluice.WithLogger(quiet), sluice.WithReservations(sluice.ReserveOptions{MaxDebt: 10}))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := l.Reserve(ctx, "k", 60)
	b, _ := l.Reserve(ctx, "k", 30)
	if s, err := a.Settle(ctx, 20); err != nil || s.Remaining != 50 {
		t.Fatalf("settle below within the day: %+v %v, want 50 left", s, err)
	}
	clock.SetTime(time.Date(2026, 3, 9, 0, 0, 1, 0, la)) // the next day
	if s, err := b.Settle(ctx, 10); err != nil || s.Remaining != 100 || !s.Settled {
		t.Fatalf("settle below after the day: %+v %v, want the new day untouched", s, err)
	}
	c, _ := l.Reserve(ctx, "k", 100)
	clock.SetTime(time.Date(2026, 3, 10, 0, 0, 1, 0, la))
	if s, err := c.Settle(ctx, 130); err != nil || s.Charged != 30 || s.Unpaid != 0 || s.Remaining != 70 {
		t.Fatalf("settle above after the day: %+v %v, want the 30 of excess charged to the new day", s, err)
	}
	d, _ := l.Reserve(ctx, "k", 70)
	if s, err := d.Settle(ctx, 100); err != nil || s.Charged != 10 || s.Unpaid != 20 || s.Debt != 10 || s.Remaining != 0 {
		t.Fatalf("settle above at the debt bound: %+v %v, want 10 charged (limit 100 + max debt 10), 20 unpaid", s, err)
	}
}

// RunReservationOverride: under a key override, a reservation is decided
// and settled against the override's limit, read in the script call.
func RunReservationOverride(t *testing.T, h Harness) {
	ctx := context.Background()
	clock := NewClock()
	l, err := sluice.New(h.Store, sluice.FixedWindow{Limit: 10, Window: time.Hour},
		sluice.WithPrefix(Prefix(t)), sluice.WithClock(clock.Now), sluice.WithTimeout(5*time.Second),
		sluice.WithLogger(quiet), sluice.WithOverrides(true), sluice.WithReservations(sluice.ReserveOptions{MaxDebt: 5}))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetOverride(ctx, "acme", sluice.Override{Limit: 50, Expires: clock.Now().Add(2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	r, err := l.Reserve(ctx, "acme", 40)
	if err != nil || !r.Allowed || r.Remaining != 10 || r.Source != sluice.SourceOverride {
		t.Fatalf("reserve under an override of 50: %+v %v", r, err)
	}
	s, err := r.Settle(ctx, 60)
	if err != nil || s.Charged != 15 || s.Unpaid != 5 || s.Debt != 5 || s.Remaining != 0 {
		t.Fatalf("settle 60 of 40 under a limit of 50 (max debt 5): %+v %v, want 15 charged, 5 unpaid, 5 owed", s, err)
	}
	if r, err := l.Reserve(ctx, "other", 40); err != nil || r.Allowed {
		t.Errorf("without the override, 40 of 10: %+v %v, want refused", r, err)
	}
}
