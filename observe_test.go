package sluice_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
)

// ctxRecorder is a ContextObserver that keeps what it is told.
type ctxRecorder struct {
	mu    sync.Mutex
	obs   []sluice.Observation
	ctxs  []context.Context
	plain int // calls of ObserveDecision
}

func (r *ctxRecorder) ObserveDecision(string, sluice.Result, error, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.plain++
}

func (r *ctxRecorder) ObserveContext(ctx context.Context, o sluice.Observation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.obs = append(r.obs, o)
	r.ctxs = append(r.ctxs, ctx)
}

type ctxMark struct{}

// TestContextObserver: a ContextObserver is told of every decision, with
// the caller's context, what answered (the store, the deny cache, the fail
// mode), the cost, the algorithm and the store key, and never through
// ObserveDecision.
func TestContextObserver(t *testing.T) {
	rec := &ctxRecorder{}
	p := sluice.FixedWindow{Limit: 2, Window: time.Minute}
	l, err := sluice.New(memstore.New(), p, sluice.WithName("api"), sluice.WithObserver(rec), sluice.WithDenyCache(true))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.WithValue(context.Background(), ctxMark{}, "caller")
	before := time.Now()
	for range 2 {
		if res, _ := l.AllowN(ctx, "alice", 1); !res.Allowed {
			t.Fatal("refused within the limit")
		}
	}
	l.AllowN(ctx, "alice", 1) // refused by the store: cached
	l.AllowN(ctx, "alice", 1) // refused by the deny cache
	broken, err := sluice.New(brokenStore{}, p, sluice.WithName("broken"), sluice.WithObserver(rec), sluice.WithFailMode(sluice.FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	broken.AllowN(ctx, "bob", 2)
	// The multi form tells the same.
	sluice.AllowAll(ctx, []sluice.Check{{Limiter: l, Key: "carol", Cost: 1}})

	want := []struct {
		limiter, key string
		answer       sluice.Answer
		cost         int64
		allowed      bool
		err          bool
	}{
		{"api", driver.Key(sluice.DefaultPrefix, "api", l.Rule(), "alice"), sluice.AnswerStore, 1, true, false},
		{"api", driver.Key(sluice.DefaultPrefix, "api", l.Rule(), "alice"), sluice.AnswerStore, 1, true, false},
		{"api", driver.Key(sluice.DefaultPrefix, "api", l.Rule(), "alice"), sluice.AnswerStore, 1, false, false},
		{"api", driver.Key(sluice.DefaultPrefix, "api", l.Rule(), "alice"), sluice.AnswerDenyCache, 1, false, false},
		{"broken", driver.Key(sluice.DefaultPrefix, "broken", broken.Rule(), "bob"), sluice.AnswerFailMode, 2, false, true},
		{"api", driver.Key(sluice.DefaultPrefix, "api", l.Rule(), "carol"), sluice.AnswerStore, 1, true, false},
	}
	if rec.plain != 0 {
		t.Errorf("ObserveDecision called %d times on a ContextObserver", rec.plain)
	}
	if len(rec.obs) != len(want) {
		t.Fatalf("told of %d decisions, want %d: %+v", len(rec.obs), len(want), rec.obs)
	}
	for i, w := range want {
		o := rec.obs[i]
		if o.Limiter != w.limiter || o.Key != w.key || o.Answer != w.answer || o.Cost != w.cost ||
			o.Result.Allowed != w.allowed || (o.Err != nil) != w.err || o.Algorithm != driver.AlgorithmFixedWindow {
			t.Errorf("decision %d: %+v, want %+v", i, o, w)
		}
		if o.Start.Before(before) || o.Latency < 0 || o.Answer == sluice.AnswerDenyCache && o.Latency != 0 {
			t.Errorf("decision %d: start %v (test began %v), latency %v", i, o.Start, before, o.Latency)
		}
		if rec.ctxs[i].Value(ctxMark{}) != "caller" {
			t.Errorf("decision %d: not the caller's context", i)
		}
	}
	for a, s := range map[sluice.Answer]string{sluice.AnswerStore: "store", sluice.AnswerDenyCache: "deny_cache", sluice.AnswerFailMode: "fail_mode"} {
		if a.String() != s {
			t.Errorf("%d.String() = %q, want %q", a, a.String(), s)
		}
	}
}
