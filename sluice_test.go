package sluice_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
)

// brokenStore fails every decision, or blocks until the context ends.
type brokenStore struct{ block bool }

func (s brokenStore) Do(ctx context.Context, batch []driver.Op) error {
	if s.block {
		// A store that never hears back still returns by the Ops' deadline,
		// as the Store contract requires.
		t := time.NewTimer(time.Until(batch[0].Deadline))
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return context.DeadlineExceeded
		}
	}
	for i := range batch {
		batch[i].Err = errors.New("connection refused")
	}
	return nil
}

func (brokenStore) Delete(context.Context, ...string) error { return errors.New("connection refused") }

type recorder struct {
	mu   sync.Mutex
	res  []sluice.Result
	errs []error
}

func (r *recorder) ObserveDecision(_ string, res sluice.Result, err error, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res = append(r.res, res)
	r.errs = append(r.errs, err)
}

func TestFailModes(t *testing.T) {
	p := sluice.GCRA{Rate: 1, Per: time.Second, Burst: 1}
	ctx := context.Background()
	for _, block := range []bool{false, true} {
		for _, mode := range []sluice.FailMode{sluice.FailOpen, sluice.FailClosed} {
			rec := &recorder{}
			l, err := sluice.New(&brokenStore{block: block}, p, sluice.WithFailMode(mode), sluice.WithTimeout(20*time.Millisecond), sluice.WithObserver(rec))
			if err != nil {
				t.Fatal(err)
			}
			res, err := l.Allow(ctx, "k")
			if err != nil {
				t.Fatalf("block=%v %v: error %v; a degraded decision is not an error", block, mode, err)
			}
			if !res.Degraded || res.Allowed != (mode == sluice.FailOpen) || res.Limit != 1 {
				t.Fatalf("block=%v %v: %+v", block, mode, res)
			}
			if mode == sluice.FailClosed && res.RetryAfter <= 0 {
				t.Fatalf("fail-closed refusal without RetryAfter: %+v", res)
			}
			if len(rec.errs) != 1 || rec.errs[0] == nil || !rec.res[0].Degraded {
				t.Fatalf("observer saw %+v %v", rec.res, rec.errs)
			}
			if err := l.Reset(ctx, "k"); !errors.Is(err, sluice.ErrStoreUnavailable) {
				t.Fatalf("Reset on a broken store: %v", err)
			}
		}
	}
}

func TestCallerContextEnds(t *testing.T) {
	l, _ := sluice.New(&brokenStore{block: true}, sluice.GCRA{Rate: 1, Per: time.Second, Burst: 1}, sluice.WithTimeout(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := l.Allow(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Allow with an ended context: %v, want context.DeadlineExceeded", err)
	}
}

func TestShadow(t *testing.T) {
	rec := &recorder{}
	l, _ := sluice.New(memstore.New(), sluice.FixedWindow{Limit: 1, Window: time.Minute}, sluice.WithShadow(true), sluice.WithObserver(rec))
	ctx := context.Background()
	if !l.Shadow() {
		t.Error("Shadow() is false for a limiter in shadow mode")
	}
	if plain, _ := sluice.New(memstore.New(), sluice.FixedWindow{Limit: 1, Window: time.Minute}); plain.Shadow() || (&sluice.Limiter{}).Shadow() {
		t.Error("Shadow() is true for a limiter not in shadow mode")
	}
	first, _ := l.Allow(ctx, "k")
	second, _ := l.Allow(ctx, "k")
	if !first.Allowed || first.Shadowed {
		t.Fatalf("first: %+v", first)
	}
	if !second.Allowed || !second.Shadowed || second.RetryAfter != 0 {
		t.Fatalf("second: %+v; want allowed and shadowed", second)
	}
	if len(rec.res) != 2 || !rec.res[1].Shadowed {
		t.Fatalf("observer saw %+v", rec.res)
	}
}

func TestWaitDeadline(t *testing.T) {
	l, _ := sluice.New(memstore.New(), sluice.GCRA{Rate: 1, Per: time.Hour, Burst: 1})
	ctx := context.Background()
	if err := l.Wait(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	// The next unit comes in an hour: Wait gives up at once.
	if err := l.Wait(wctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait: %v, want context.DeadlineExceeded", err)
	}
	if wctx.Err() != nil {
		t.Fatal("Wait waited for the deadline instead of returning at once")
	}
}

// TestTypedNilStoreAndZeroLimiter: a nil store of any type is refused by
// New, and a Limiter New did not make never panics.
func TestTypedNilStoreAndZeroLimiter(t *testing.T) {
	var ms *memstore.Store // as a failed valkeystore.New returns a nil *Store
	var fs storeFunc
	p := sluice.GCRA{Rate: 1, Per: time.Second, Burst: 1}
	for _, s := range []driver.Store{ms, fs} {
		if _, err := sluice.New(s, p); !errors.Is(err, sluice.ErrInvalidPolicy) || !strings.Contains(err.Error(), "nil") {
			t.Errorf("New(%T(nil)): %v, want ErrInvalidPolicy naming the nil store", s, err)
		}
	}
	ctx := context.Background()
	for name, l := range map[string]*sluice.Limiter{"zero": {}, "nil": nil} {
		if _, err := l.Peek(ctx, "k"); !errors.Is(err, sluice.ErrNotCreated) {
			t.Errorf("%s Limiter: Peek: %v", name, err)
		}
		if _, err := l.Allow(ctx, "k"); !errors.Is(err, sluice.ErrNotCreated) {
			t.Errorf("%s Limiter: Allow: %v", name, err)
		}
		if err := l.Wait(ctx, "k"); !errors.Is(err, sluice.ErrNotCreated) {
			t.Errorf("%s Limiter: Wait: %v", name, err)
		}
		if err := l.Reset(ctx, "k"); !errors.Is(err, sluice.ErrNotCreated) {
			t.Errorf("%s Limiter: Reset: %v", name, err)
		}
		if _, err := sluice.AllowAll(ctx, []sluice.Check{{Limiter: l, Key: "k", Cost: 1}}); err == nil {
			t.Errorf("%s Limiter: AllowAll: no error", name)
		}
		if _, err := sluice.AllowEach(ctx, []sluice.Check{{Limiter: l, Key: "k", Cost: 1}}); err == nil {
			t.Errorf("%s Limiter: AllowEach: no error", name)
		}
		_, _, _ = l.Name(), l.Rule(), l.FailMode()
	}
}

// storeFunc is a Store of a func type, whose nil is typed too.
type storeFunc func(ctx context.Context, batch []driver.Op) error

func (f storeFunc) Do(ctx context.Context, batch []driver.Op) error { return f(ctx, batch) }
func (f storeFunc) Delete(context.Context, ...string) error         { return nil }
