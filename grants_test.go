package sluice_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
)

func grantLimiter(t *testing.T, st *memstore.Store, p sluice.Policy, opts ...sluice.Option) *sluice.Limiter {
	t.Helper()
	l, err := sluice.New(st, p, append([]sluice.Option{sluice.WithGrants(sluice.GrantOptions{})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestGrantsOneProcess: one process alone admits exactly the bucket's
// burst at once, most decisions locally, and gives its units back on Close.
func TestGrantsOneProcess(t *testing.T) {
	st := memstore.New()
	l := grantLimiter(t, st, sluice.TokenBucket{Capacity: 100, Rate: 1, Per: time.Hour})
	ctx := context.Background()
	allowed := 0
	for range 300 {
		res, err := l.Allow(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			allowed++
		} else if res.RetryAfter <= 0 {
			t.Fatalf("a refusal without RetryAfter: %+v", res)
		}
	}
	s := l.GrantStats()
	if allowed != 100 || s.Local < 250 || s.Keys != 1 {
		t.Fatalf("allowed %d of a burst of 100; stats %+v", allowed, s)
	}
}

// TestGrantsCloseGivesBack: units held by a limiter come back to the key on
// Close, for another process.
func TestGrantsCloseGivesBack(t *testing.T) {
	st := memstore.New()
	pol := sluice.FixedWindow{Limit: 40, Window: time.Hour}
	a := grantLimiter(t, st, pol)
	ctx := context.Background()
	for range 10 {
		if res, _ := a.Allow(ctx, "k"); !res.Allowed {
			t.Fatal("refused")
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if s := a.GrantStats(); s.Returned != s.Granted-10 || s.Returned == 0 {
		t.Fatalf("granted %d, admitted 10, returned %d", s.Granted, s.Returned)
	}
	b := grantLimiter(t, st, pol)
	n := 0
	for range 100 {
		if res, _ := b.Allow(ctx, "k"); res.Allowed {
			n++
		}
	}
	if n != 30 {
		t.Fatalf("after a's Close, b admitted %d, want the 30 left", n)
	}
}

// TestGrantsCloseLeaves: Close tells the store the process left a key
// even when it holds nothing of it (its units all spent): the store drops
// its record at once, not when its grant ends (its units spent but not
// reported would cap the level's refill, and its place among the holders
// would lower the others' fair cap, until then).
func TestGrantsCloseLeaves(t *testing.T) {
	restore := sluice.SetGrantHooks(func(f func()) { f() }, nil)
	defer restore()
	st := memstore.New()
	pol := sluice.FixedWindow{Limit: 10, Window: time.Hour}
	rule, _ := pol.Rule()
	a := grantLimiter(t, st, pol, sluice.WithName("leaves"))
	for range 12 {
		a.Allow(context.Background(), "k")
	}
	key := driver.GrantKey(sluice.DefaultPrefix, "leaves", rule, "k")
	if _, _, hs, _ := st.GrantHolders(key); a.GrantUnspent() != 0 || len(hs) != 1 {
		t.Fatalf("before Close: %d unspent, holders %v; want 0 and a's record", a.GrantUnspent(), hs)
	}
	calls := a.GrantStats().Calls
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, hs, _ := st.GrantHolders(key); len(hs) != 0 || a.GrantStats().Calls != calls+1 {
		t.Fatalf("after Close: holders %v, %d calls (before %d): want no record, one call", hs, a.GrantStats().Calls, calls)
	}
}

// TestGrantsRefused: what grants cannot honour is refused at New with the
// reason; bad input is an error, never a panic.
func TestGrantsRefused(t *testing.T) {
	st := memstore.New()
	g := sluice.WithGrants(sluice.GrantOptions{})
	tb := sluice.TokenBucket{Capacity: 10, Rate: 1, Per: time.Second}
	cases := map[string]struct {
		p    sluice.Policy
		opts []sluice.Option
		want string
	}{
		"sliding window": {sluice.SlidingWindow{Limit: 10, Window: time.Second}, nil, "previous window"},
		"sliding log":    {sluice.SlidingLog{Limit: 10, Window: time.Second}, nil, "counts each unit"},
		"in flight":      {sluice.InFlight{Limit: 10, Lease: time.Second}, nil, "not a rate"},
		"count rejected": {sluice.FixedWindow{Limit: 10, Window: time.Second, CountRejected: true}, nil, "CountRejected"},
		"reservations":   {tb, []sluice.Option{sluice.WithReservations(sluice.ReserveOptions{})}, "reservations"},
		"plans":          {tb, []sluice.Option{sluice.WithPlan("pro", sluice.TokenBucket{Capacity: 20, Rate: 1, Per: time.Second})}, "plan"},
		"overrides":      {tb, []sluice.Option{sluice.WithOverrides(true)}, "override"},
		"deny cache":     {tb, []sluice.Option{sluice.WithDenyCache(true)}, "WithDenyCache"},
		"warning":        {tb, []sluice.Option{sluice.WithWarning(80)}, "WithWarning"},
		"penalty":        {tb, []sluice.Option{sluice.WithPenalty(sluice.Penalty{After: 3, Within: time.Minute, Block: time.Minute})}, "WithPenalty"},
		"short life":     {tb, []sluice.Option{sluice.WithGrants(sluice.GrantOptions{Life: time.Millisecond})}, "Life"},
		"long period":    {tb, []sluice.Option{sluice.WithGrants(sluice.GrantOptions{Life: time.Second, Period: time.Second})}, "Period"},
		"keys":           {tb, []sluice.Option{sluice.WithGrants(sluice.GrantOptions{MaxKeys: -1})}, "MaxKeys"},
	}
	for name, c := range cases {
		_, err := sluice.New(st, c.p, append([]sluice.Option{g}, c.opts...)...)
		if !errors.Is(err, sluice.ErrInvalidPolicy) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a refusal naming %q", name, err, c.want)
		}
	}
	if _, err := sluice.New(st, tb, sluice.WithFailMode(sluice.FailShare)); !errors.Is(err, sluice.ErrInvalidPolicy) {
		t.Errorf("FailShare without grants: %v", err)
	}
	l := grantLimiter(t, st, tb)
	ctx := context.Background()
	if _, err := l.AllowN(ctx, "k", 11); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Errorf("a cost above the burst: %v", err)
	}
	if _, err := l.AllowN(ctx, "k", -1); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Errorf("a negative cost: %v", err)
	}
	if _, err := l.Allow(ctx, ""); !errors.Is(err, sluice.ErrInvalidKey) {
		t.Errorf("an empty key: %v", err)
	}
	huge := strings.Repeat("é{x}", 10000)
	if res, err := l.Allow(ctx, huge); err != nil || !res.Allowed {
		t.Errorf("a huge key: %+v, %v", res, err)
	}
	if _, err := sluice.AllowAll(ctx, []sluice.Check{{Limiter: l, Key: "k", Cost: 1}}); !errors.Is(err, sluice.ErrInvalidPolicy) {
		t.Errorf("AllowAll with a grant limiter: %v", err)
	}
}

// TestGrantsBoundedKeys: keys come from client input; the grant state per
// process stays within MaxKeys (evicted keys give their units back).
func TestGrantsBoundedKeys(t *testing.T) {
	st := memstore.New()
	l, err := sluice.New(st, sluice.TokenBucket{Capacity: 10, Rate: 1, Per: time.Second},
		sluice.WithGrants(sluice.GrantOptions{MaxKeys: 64}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	for i := range 5000 {
		if _, err := l.Allow(ctx, "client-"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+time.Duration(i).String()); err != nil {
			t.Fatal(err)
		}
	}
	if k := l.GrantStats().Keys; k > 64 {
		t.Fatalf("%d keys held, MaxKeys 64", k)
	}
}

// TestGrantsFailShare: with the store unreachable, FailShare decides
// against the process's share, Degraded.
func TestGrantsFailShare(t *testing.T) {
	st := &failingStore{Store: memstore.New()}
	fs, err := sluice.New(st, sluice.TokenBucket{Capacity: 100, Rate: 100, Per: time.Second},
		sluice.WithGrants(sluice.GrantOptions{}), sluice.WithFailMode(sluice.FailShare), sluice.WithTimeout(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	ctx := context.Background()
	if res, _ := fs.Allow(ctx, "k"); !res.Allowed || res.Degraded {
		t.Fatalf("healthy: %+v", res)
	}
	st.down.Store(true)
	time.Sleep(50 * time.Millisecond)
	allowed, degraded := 0, 0
	for range 500 {
		res, _ := fs.Allow(ctx, "k")
		if res.Degraded {
			degraded++
			if res.Allowed {
				allowed++
			}
		}
	}
	// The share of a lone holder is the whole rate: over ~50ms and the
	// decisions' time, a few units, never the 500 asked.
	if degraded == 0 || allowed == 0 || allowed > 100 {
		t.Fatalf("store down: %d degraded, %d allowed by the share", degraded, allowed)
	}
}

// failingStore is a memstore whose grant calls fail while down.
type failingStore struct {
	*memstore.Store
	down atomic.Bool
}

func (s *failingStore) Grant(ctx context.Context, batch []driver.GrantOp) error {
	if s.down.Load() {
		for i := range batch {
			batch[i].Err = errors.New("connection refused")
		}
		return nil
	}
	return s.Store.Grant(ctx, batch)
}

// countingObserver counts the answers it is told of.
type countingObserver struct{ grant, store atomic.Int64 }

func (o *countingObserver) ObserveDecision(string, sluice.Result, error, time.Duration) {}
func (o *countingObserver) ObserveContext(_ context.Context, ob sluice.Observation) {
	switch ob.Answer {
	case sluice.AnswerGrant:
		o.grant.Add(1)
	case sluice.AnswerStore:
		o.store.Add(1)
	}
}

// TestGrantsResetAndObserve: Reset makes the level all that no holder
// holds (a drained key admits again at once), and an observer sees local
// decisions as AnswerGrant.
func TestGrantsResetAndObserve(t *testing.T) {
	st := memstore.New()
	obs := &countingObserver{}
	l := grantLimiter(t, st, sluice.GCRA{Rate: 1, Per: time.Hour, Burst: 20}, sluice.WithObserver(obs))
	ctx := context.Background()
	drain := func() int {
		n := 0
		for range 60 {
			if res, _ := l.Allow(ctx, "k"); res.Allowed {
				n++
			}
		}
		return n
	}
	if n := drain(); n != 20 {
		t.Fatalf("admitted %d of a burst of 20", n)
	}
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if n := drain(); n != 20 {
		t.Fatalf("after Reset admitted %d, want the burst of 20", n)
	}
	if obs.grant.Load() < 60 || obs.store.Load() == 0 || l.GrantStats().Local != obs.grant.Load() {
		t.Fatalf("observer: %d grant, %d store answers; stats %+v", obs.grant.Load(), obs.store.Load(), l.GrantStats())
	}
}

// TestGrantsQuietKeyGivesBack: a key without decisions for a period gives
// its units back (the sweeper, on the real clock).
func TestGrantsQuietKeyGivesBack(t *testing.T) {
	st := memstore.New()
	l := grantLimiter(t, st, sluice.TokenBucket{Capacity: 100, Rate: 1, Per: time.Hour},
		sluice.WithGrants(sluice.GrantOptions{Life: 400 * time.Millisecond, Period: 20 * time.Millisecond}))
	ctx := context.Background()
	for range 30 {
		l.Allow(ctx, "k")
	}
	deadline := time.Now().Add(5 * time.Second) // generous on a loaded machine
	for time.Now().Before(deadline) && l.GrantStats().Returned == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	if s := l.GrantStats(); s.Returned == 0 || s.Returned != s.Granted-30 {
		t.Fatalf("a quiet key kept its units: %+v", s)
	}
}

// TestGrantsMixedDetected: a grant call that finds the key's plain state
// (a process deciding the same policy without grants) counts it.
func TestGrantsMixedDetected(t *testing.T) {
	st := memstore.New()
	pol := sluice.FixedWindow{Limit: 100, Window: time.Hour}
	plain, err := sluice.New(st, pol, sluice.WithName("api"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	plain.Allow(ctx, "k")
	g := grantLimiter(t, st, pol, sluice.WithName("api"))
	g.Allow(ctx, "k")
	if m := g.GrantStats().Mixed; m == 0 {
		t.Fatalf("mixed setup not detected: %+v", g.GrantStats())
	}
}

// TestGrantStatsAdd: Add sums every field (a field added to GrantStats and
// forgotten in Add fails here).
func TestGrantStatsAdd(t *testing.T) {
	var a, b, want sluice.GrantStats
	va, vb, vw := reflect.ValueOf(&a).Elem(), reflect.ValueOf(&b).Elem(), reflect.ValueOf(&want).Elem()
	for i := range va.NumField() {
		va.Field(i).SetInt(int64(i + 1))
		vb.Field(i).SetInt(int64(100 * (i + 1)))
		vw.Field(i).SetInt(int64(101 * (i + 1)))
	}
	if got := a.Add(b); got != want {
		t.Fatalf("%+v.Add(%+v) = %+v, want %+v", a, b, got, want)
	}
}
