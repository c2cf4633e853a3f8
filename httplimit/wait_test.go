package httplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
)

// countingStore counts the decisions that reach the store.
type countingStore struct {
	driver.Store
	calls atomic.Int64
}

func (s *countingStore) Do(ctx context.Context, b []driver.Op) error {
	s.calls.Add(int64(len(b)))
	return s.Store.Do(ctx, b)
}

func waitLimiter(t testing.TB, store driver.Store, rate float64) *sluice.Limiter {
	t.Helper()
	return newLimiter(t, store, sluice.GCRA{Rate: rate, Per: time.Second, Burst: 1}, "w", nil)
}

// TestWaitAdmits: a request refused for less than Wait waits its
// RetryAfter and is allowed, deciding twice; one refused for longer is
// refused at once, deciding once.
func TestWaitAdmits(t *testing.T) {
	store := &countingStore{Store: memstore.New()}
	l := waitLimiter(t, store, 10) // one per 100ms
	h := newMiddleware(t, Config{Limits: []Limit{{Limiter: l, Key: Constant("k"), Wait: 5 * time.Second}}})
	if w := serve(h, "192.0.2.1:1"); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	store.calls.Store(0)
	if w := serve(h, "192.0.2.1:1"); w.Code != 200 {
		t.Fatalf("second (waits about 100ms): %d %q", w.Code, w.Body)
	}
	if n := store.calls.Load(); n != 2 {
		t.Fatalf("the waiting request decided %d times, want 2 (refused, then allowed after RetryAfter)", n)
	}
	slow := waitLimiter(t, store, 0.01) // one per 100s
	h2 := newMiddleware(t, Config{Limits: []Limit{{Limiter: slow, Key: Constant("k"), Wait: time.Second}}})
	serve(h2, "192.0.2.1:1")
	store.calls.Store(0)
	if w := serve(h2, "192.0.2.1:1"); w.Code != 429 || store.calls.Load() != 1 {
		t.Fatalf("RetryAfter past Wait: %d after %d decisions, want 429 after 1", w.Code, store.calls.Load())
	}
}

// waitingRequest starts a request through h with a context the caller
// cancels; done is closed when it is answered.
func waitingRequest(h http.Handler, peer string) (cancel func(), rec *httptest.ResponseRecorder, done chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
	r.RemoteAddr = peer
	rec = httptest.NewRecorder()
	done = make(chan struct{})
	go func() { h.ServeHTTP(rec, r); close(done) }()
	return cancel, rec, done
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 30s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWaitBounds: MaxWaitingPerKey and MaxWaiting refuse at once past
// them; a waiter whose client goes away leaves at once, takes nothing,
// and frees its place.
func TestWaitBounds(t *testing.T) {
	store := memstore.New()
	l := waitLimiter(t, store, 0.1) // one per 10s
	m, err := New(Config{Limits: []Limit{{Limiter: l, Key: ClientAddr(nil), Wait: time.Minute}}, MaxWaiting: 2, MaxWaitingPerKey: 1})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, peer := range []string{"192.0.2.1:1", "192.0.2.2:1", "192.0.2.3:1"} {
		serve(h, peer)
	}
	cancel1, rec1, done1 := waitingRequest(h, "192.0.2.1:1")
	waitFor(t, "one waiter", func() bool { return m.Waiting() == 1 })
	if w := serve(h, "192.0.2.1:1"); w.Code != 429 {
		t.Fatalf("a second waiter for the key: %d, want 429 at once", w.Code)
	}
	cancel2, _, done2 := waitingRequest(h, "192.0.2.2:1")
	waitFor(t, "two waiters", func() bool { return m.Waiting() == 2 })
	if w := serve(h, "192.0.2.3:1"); w.Code != 429 {
		t.Fatalf("a third waiter: %d, want 429 at once (MaxWaiting 2)", w.Code)
	}
	before, err := l.Peek(context.Background(), sluice.Identity("ip", "192.0.2.1"))
	if err != nil {
		t.Fatal(err)
	}
	cancel1()
	<-done1
	if rec1.Code == 200 {
		t.Fatalf("a client that went away was answered 200")
	}
	after, _ := l.Peek(context.Background(), sluice.Identity("ip", "192.0.2.1"))
	if after.RetryAfter > before.RetryAfter {
		t.Fatalf("the waiter that left took something: RetryAfter %v then %v", before.RetryAfter, after.RetryAfter)
	}
	if m.Waiting() != 1 {
		t.Fatalf("Waiting %d after one left, want 1", m.Waiting())
	}
	cancel2()
	<-done2
	if m.Waiting() != 0 {
		t.Fatalf("Waiting %d, want 0", m.Waiting())
	}
}

// TestWaitRefused: New refuses a negative Wait or bound, and Wait on a
// limiter with CountRejected.
func TestWaitRefused(t *testing.T) {
	store := memstore.New()
	l := waitLimiter(t, store, 1)
	cr := newLimiter(t, store, sluice.SlidingLog{Limit: 1, Window: time.Minute, CountRejected: true}, "cr", nil)
	shadow := newLimiter(t, store, sluice.FixedWindow{Limit: 1, Window: time.Minute}, "shadow", nil, sluice.WithShadow(true))
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Limits: []Limit{{Limiter: l, Key: Constant("k"), Wait: -1}}}, "Wait must not be negative"},
		{Config{Limits: []Limit{{Limiter: l, Key: Constant("k")}}, MaxWaiting: -1}, "MaxWaiting"},
		{Config{Limits: []Limit{{Limiter: cr, Key: Constant("k"), Wait: time.Second}}}, "CountRejected"},
		{Config{Limits: []Limit{{Limiter: shadow, Key: Constant("k"), Wait: time.Second}}}, "shadow mode"},
		{Config{Limits: []Limit{{Limiter: shadow, Key: Constant("k"), DenyStatus: 503}}}, "shadow mode"},
		{Config{Limits: []Limit{{Limiter: shadow, Key: Constant("k"), DenyBody: []byte(`{}`)}}}, "shadow mode"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want an error with %q", err, tc.want)
		}
	}
}

// TestThousandWaiters: a thousand waiting requests cost little memory
// and no busy loop: no decision while they wait, each leaves at once when
// its client goes away.
func TestThousandWaiters(t *testing.T) {
	const n = 1000
	store := &countingStore{Store: memstore.New()}
	l := waitLimiter(t, store, 1.0/60) // one a minute
	m, err := New(Config{Limits: []Limit{{Limiter: l, Key: Constant("all"), Wait: 2 * time.Minute}}, MaxWaiting: n, MaxWaitingPerKey: n})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	serve(h, "192.0.2.1:1")
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	recs := make([]*httptest.ResponseRecorder, n)
	for i := range n {
		recs[i] = httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
		r.RemoteAddr = "192.0.2.1:1"
		wg.Go(func() { h.ServeHTTP(recs[i], r) })
	}
	waitFor(t, "a thousand waiters", func() bool { return m.Waiting() == n })
	runtime.GC()
	runtime.ReadMemStats(&after)
	calls := store.calls.Load()
	time.Sleep(200 * time.Millisecond)
	if got := store.calls.Load(); got != calls || calls != n+1 {
		t.Fatalf("decisions: %d once all waited, %d 200ms later; want %d (one each), unchanged", calls, got, n+1)
	}
	perWaiter := (int64(after.HeapInuse+after.StackInuse) - int64(before.HeapInuse+before.StackInuse)) / n
	t.Logf("%d waiters: %d bytes each (heap and stacks, request and recorder included)", n, perWaiter)
	if perWaiter > 64<<10 {
		t.Errorf("%d bytes per waiter, want under 64 KiB", perWaiter)
	}
	cancel()
	wg.Wait()
	if m.Waiting() != 0 {
		t.Fatalf("Waiting %d after every client left", m.Waiting())
	}
	for i, rec := range recs {
		if rec.Code == 200 {
			t.Fatalf("waiter %d answered 200", i)
		}
	}
}
