package sluice_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
)

// transientStore is a driver.TransientKeys over a memstore (which keeps
// keys: it is given copies), counting the decisions per key.
type transientStore struct {
	*memstore.Store
	mu    sync.Mutex
	calls map[string]int
}

func (s *transientStore) TransientKeys() {}

func (s *transientStore) Do(ctx context.Context, batch []driver.Op) error {
	own := make([]driver.Op, len(batch))
	s.mu.Lock()
	for i, op := range batch {
		op.Key = strings.Clone(op.Key)
		own[i] = op
		s.calls[op.Key]++
	}
	s.mu.Unlock()
	err := s.Store.Do(ctx, own)
	for i := range batch {
		batch[i].Result, batch[i].Receipt, batch[i].Err = own[i].Result, own[i].Receipt, own[i].Err
	}
	return err
}

// TestTransientKeysDenyCache decides on a driver.TransientKeys store,
// whose Ops' keys the limiter builds in buffers it reuses: the refusals the
// deny cache keeps stay under their own keys while later decisions reuse
// the buffers, so a cached key is still answered locally and no other key
// is.
func TestTransientKeysDenyCache(t *testing.T) {
	ctx := context.Background()
	store := &transientStore{Store: memstore.New(), calls: map[string]int{}}
	var _ driver.TransientKeys = store
	l, err := sluice.New(store, sluice.GCRA{Rate: 1, Per: time.Hour, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for _, k := range keys {
		if res, _ := l.Allow(ctx, k); !res.Allowed {
			t.Fatalf("%s: first decision refused", k)
		}
		if res, _ := l.Allow(ctx, k); res.Allowed {
			t.Fatalf("%s: second decision allowed", k)
		}
	}
	for _, k := range keys {
		for range 3 {
			if res, _ := l.Allow(ctx, k); res.Allowed {
				t.Fatalf("%s: allowed after its refusal", k)
			}
		}
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	if len(store.calls) != len(keys) {
		t.Errorf("the store saw %d keys, want %d: %v", len(store.calls), len(keys), store.calls)
	}
	for k, n := range store.calls {
		if n != 2 {
			t.Errorf("%s: %d decisions reached the store, want 2 (the later ones answered by the deny cache)", k, n)
		}
	}
}

// allowStore allows every decision without allocating; transientAllowStore
// is the same, a driver.TransientKeys.
type allowStore struct{}

func (allowStore) Do(_ context.Context, batch []driver.Op) error {
	for i := range batch {
		batch[i].Result = driver.Result{Allowed: true, Remaining: 1}
	}
	return nil
}

func (allowStore) Delete(context.Context, ...string) error { return nil }

type transientAllowStore struct{ allowStore }

func (*transientAllowStore) TransientKeys() {}

// TestTransientKeysAllocations: on a driver.TransientKeys store, a
// decision the store makes allocates nothing in the limiter; on another
// store, its key is a string of its own (one allocation).
func TestTransientKeysAllocations(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		store driver.Store
		want  float64
	}{{&transientAllowStore{}, 0}, {&allowStore{}, 1}} {
		l, err := sluice.New(tc.store, sluice.GCRA{Rate: 1, Per: time.Second, Burst: 5})
		if err != nil {
			t.Fatal(err)
		}
		allocs := testing.AllocsPerRun(200, func() {
			if res, err := l.Allow(ctx, "user-1"); err != nil || !res.Allowed {
				t.Fatalf("%+v %v", res, err)
			}
		})
		if allocs != tc.want {
			t.Errorf("%T: %v allocations per decision, want %v", tc.store, allocs, tc.want)
		}
	}
}

// TestAllowEachAllocations: AllowEach and AllowAll of one check (Envoy's
// usual call) allocate only their Decision's Results on a
// driver.TransientKeys store, and the key besides on another store; the
// Op is pooled, as a lone decision's is.
func TestAllowEachAllocations(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		store driver.Store
		want  float64
	}{{&transientAllowStore{}, 1}, {&allowStore{}, 2}} {
		l, err := sluice.New(tc.store, sluice.GCRA{Rate: 1, Per: time.Second, Burst: 5})
		if err != nil {
			t.Fatal(err)
		}
		checks := []sluice.Check{{Limiter: l, Key: "user-1", Cost: 1}}
		for name, decide := range map[string]func(context.Context, []sluice.Check) (sluice.Decision, error){
			"AllowEach": sluice.AllowEach, "AllowAll": sluice.AllowAll} {
			allocs := testing.AllocsPerRun(200, func() {
				if d, err := decide(ctx, checks); err != nil || !d.Allowed || len(d.Results) != 1 || d.Leases != nil {
					t.Fatalf("%s: %+v %v", name, d, err)
				}
			})
			if allocs != tc.want {
				t.Errorf("%T: %v allocations per %s of one check, want %v", tc.store, allocs, name, tc.want)
			}
		}
	}
}

// keyKeeper is a ContextObserver that keeps every Observation's Key.
type keyKeeper struct{ keys []string }

func (k *keyKeeper) ObserveDecision(string, sluice.Result, error, time.Duration) {}

func (k *keyKeeper) ObserveContext(_ context.Context, o sluice.Observation) {
	k.keys = append(k.keys, o.Key)
}

// TestTransientKeysObserved: a ContextObserver may keep the keys it is
// given, so a limiter with one passes keys of their own even on a
// driver.TransientKeys store: the keys kept are still the decisions'.
func TestTransientKeysObserved(t *testing.T) {
	ctx := context.Background()
	obs := &keyKeeper{}
	l, err := sluice.New(&transientAllowStore{}, sluice.GCRA{Rate: 1, Per: time.Second, Burst: 5}, sluice.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, id := range []string{"a", "bb", "ccc", "dddd"} {
		l.Allow(ctx, id)
		want = append(want, driver.Key(sluice.DefaultPrefix, l.Name(), l.Rule(), id))
	}
	if !slices.Equal(obs.keys, want) {
		t.Errorf("observed keys %q, want %q", obs.keys, want)
	}
}
