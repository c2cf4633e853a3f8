package server

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/memstore"
)

// decisionCounter counts the decisions the server's limiters make.
type decisionCounter struct{ n atomic.Int64 }

func (c *decisionCounter) ObserveDecision(string, sluice.Result, error, time.Duration) { c.n.Add(1) }

// waitServer is a server of yaml whose decisions obs counts.
func waitServer(t testing.TB, yaml string) (*Server, *decisionCounter) {
	t.Helper()
	cfg, err := config.Parse("wait.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	obs := &decisionCounter{}
	s, err := New(cfg, Options{Store: memstore.New(), StoreName: "memory", Logger: quietLogger(), Env: testEnv, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	return s, obs
}

// checkReq is a POST /v1/check of body, with ctx.
func checkReq(ctx context.Context, body string) *http.Request {
	return httptest.NewRequest("POST", "/v1/check", strings.NewReader(body)).WithContext(ctx)
}

// serveCheck answers a POST /v1/check of body.
func serveCheck(s *Server, ctx context.Context, body string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, checkReq(ctx, body))
	return w
}

func allowed(w *httptest.ResponseRecorder) bool {
	return w.Code == 200 && strings.Contains(w.Body.String(), `"allowed":true`)
}

// waits reads sluice_server_waits_total for the policy's limiter and
// outcome.
func waits(s *Server, limiter, outcome string) int {
	return int(testutil.ToFloat64(s.waitsTotal.WithLabelValues(limiter, outcome)))
}

// waitUntil polls cond for up to 10s (a loaded machine), failing with what.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

const waitYAML = `
policies:
  - {name: turn, algorithm: gcra, burst: 1, rate: 5/s, wait: 10s}
  - {name: short, algorithm: gcra, burst: 1, rate: 1/m, wait: 1s}
  - {name: plain, algorithm: gcra, burst: 1, rate: 1/m}
  - {name: slow, algorithm: gcra, burst: 1, rate: 2/m, wait: 1m}
forward_auth:
  trusted_proxies: [10.0.0.0/8]
  routes:
    - {path_prefix: /turn, limits: [{policy: turn, key: client_ip}]}
    - {path_prefix: /both, limits: [{policy: turn, key: client_ip}, {policy: plain, key: client_ip}]}
`

// TestWaitAdmitsServe: a request a policy with wait refuses waits for the
// refusal's RetryAfter and is admitted when the rate allows, in /v1/check
// (single and multi), reservations and forward auth; counted admitted.
func TestWaitAdmitsServe(t *testing.T) {
	s, _ := waitServer(t, waitYAML)
	ctx := context.Background()
	for i := range 2 { // the second waits about 200ms
		if w := serveCheck(s, ctx, `{"policy":"turn","key":"k"}`); !allowed(w) {
			t.Fatalf("check %d: %d %s", i+1, w.Code, w.Body)
		}
	}
	if w := serveCheck(s, ctx, `{"checks":[{"policy":"turn","key":"k"},{"policy":"plain","key":"m"}]}`); !allowed(w) {
		t.Fatalf("multi: %d %s", w.Code, w.Body)
	}
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest("POST", "/v1/reservations/reserve", strings.NewReader(`{"policy":"turn","key":"k","estimate":1}`)))
	if !allowed(w) {
		t.Fatalf("reserve: %d %s", w.Code, w.Body)
	}
	for i := range 2 {
		if w := fwd(s, "GET", "h", "/turn", "192.0.2.1"); w.Code != 200 {
			t.Fatalf("forward auth %d: %d %s", i+1, w.Code, w.Body)
		}
	}
	if got := waits(s, "turn.gcra", waitAdmitted); got != 4 {
		t.Fatalf("admitted %d, want 4", got)
	}
	if s.waiters.Waiting() != 0 {
		t.Fatalf("waiting %d", s.waiters.Waiting())
	}
}

// TestWaitBoundServe: a refusal whose RetryAfter would pass the wait is
// answered at once, as is one by a policy without wait among those
// refusing (the least wait bounds), and a peek; both count as refused for
// the policies with wait that refused.
func TestWaitBoundServe(t *testing.T) {
	s, obs := waitServer(t, waitYAML)
	ctx := context.Background()
	serveCheck(s, ctx, `{"policy":"short","key":"k"}`)
	before := obs.n.Load()
	w := serveCheck(s, ctx, `{"policy":"short","key":"k"}`)
	if allowed(w) || !strings.Contains(w.Body.String(), `"allowed":false`) {
		t.Fatalf("short: %d %s", w.Code, w.Body)
	}
	if got := obs.n.Load() - before; got != 1 {
		t.Fatalf("%d decisions, want 1 (a minute's RetryAfter passes the 1s wait: no retry)", got)
	}
	if got := waits(s, "short.gcra", waitRefused); got != 1 {
		t.Fatalf("refused %d, want 1", got)
	}
	// turn would wait 200ms, plain (no wait) refuses: refused at once.
	fwd(s, "GET", "h", "/both", "192.0.2.2")
	before = obs.n.Load()
	if w := fwd(s, "GET", "h", "/both", "192.0.2.2"); w.Code != 429 {
		t.Fatalf("both: %d", w.Code)
	}
	if got := obs.n.Load() - before; got != 2 { // one decision of two checks
		t.Fatalf("%d decisions, want 2", got)
	}
	if got := waits(s, "turn.gcra", waitRefused); got != 1 {
		t.Fatalf("turn refused %d, want 1 (plain refused too and does not wait)", got)
	}
	// A peek (cost 0) never waits.
	serveCheck(s, ctx, `{"policy":"slow","key":"p"}`)
	before = obs.n.Load()
	if w := serveCheck(s, ctx, `{"policy":"slow","key":"p","cost":0}`); allowed(w) || obs.n.Load()-before != 1 {
		t.Fatalf("peek: %s, %d decisions", w.Body, obs.n.Load()-before)
	}
}

// TestWaitAbandonServe: a waiter whose client goes away leaves at once,
// frees its place and takes nothing: the unit it waited for is the next
// request's.
func TestWaitAbandonServe(t *testing.T) {
	s, obs := waitServer(t, waitYAML)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	do(t, "POST", ts.URL+"/v1/check", `{"policy":"slow","key":"k"}`) // slow: one per 30s
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/check", strings.NewReader(`{"policy":"slow","key":"k"}`))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	waitUntil(t, "the waiter", func() bool { return s.waiters.Waiting() == 1 })
	decisions := obs.n.Load()
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the canceled request was answered")
	}
	waitUntil(t, "the waiter to leave", func() bool { return s.waiters.Waiting() == 0 })
	waitUntil(t, "abandoned counted", func() bool { return waits(s, "slow.gcra", waitAbandoned) == 1 })
	if got := obs.n.Load(); got != decisions {
		t.Fatalf("%d decisions after the client left, want %d: it decided again", got, decisions)
	}
	if waits(s, "slow.gcra", waitAdmitted)+waits(s, "slow.gcra", waitRefused) != 0 {
		t.Fatal("the abandoned wait counted otherwise too")
	}
	// Nothing taken: the key is as the first check left it.
	r := do(t, "POST", ts.URL+"/v1/check", `{"policy":"slow","key":"k","cost":0}`)
	if r.body["remaining"] != 0.0 || r.body["retry_after_ms"].(float64) < 20000 {
		t.Fatalf("after: %s", r.raw)
	}
}

// TestWaitPlacesServe: past max_waiting_per_key for a key, or
// max_waiting in all, a request is refused at once (counted full); the
// bounds hold across a reload that changes them.
func TestWaitPlacesServe(t *testing.T) {
	s, _ := waitServer(t, "max_waiting: 3\nmax_waiting_per_key: 2\n"+waitYAML)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	start := func(key string) {
		wg.Go(func() { serveCheck(s, ctx, `{"policy":"slow","key":"`+key+`"}`) })
	}
	for _, key := range []string{"a", "b", "c"} {
		serveCheck(s, ctx, `{"policy":"slow","key":"`+key+`"}`)
	}
	start("a")
	start("a")
	waitUntil(t, "two waiters of a", func() bool { return s.waiters.Waiting() == 2 })
	if w := serveCheck(s, ctx, `{"policy":"slow","key":"a"}`); allowed(w) || w.Code != 200 {
		t.Fatalf("third of a: %d %s", w.Code, w.Body)
	}
	start("b")
	waitUntil(t, "three waiters", func() bool { return s.waiters.Waiting() == 3 })
	if w := serveCheck(s, ctx, `{"policy":"slow","key":"c"}`); allowed(w) {
		t.Fatalf("c past max_waiting: %s", w.Body)
	}
	if got := waits(s, "slow.gcra", waitFull); got != 2 {
		t.Fatalf("full %d, want 2", got)
	}
	cfg, err := config.Parse("wait.yaml", []byte("max_waiting: 4\nmax_waiting_per_key: 2\n"+waitYAML))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	start("c")
	waitUntil(t, "four waiters after the reload", func() bool { return s.waiters.Waiting() == 4 })
	cancel()
	wg.Wait()
	if s.waiters.Waiting() != 0 || s.waiters.Keys() != 0 {
		t.Fatalf("after every client left: %d waiting, %d keys", s.waiters.Waiting(), s.waiters.Keys())
	}
	if got := waits(s, "slow.gcra", waitAbandoned); got != 4 {
		t.Fatalf("abandoned %d, want 4", got)
	}
}

// TestThousandWaitersServe: a thousand requests waiting in /v1/check cost
// little memory and no busy loop: no decision while they wait, each
// leaves at once when its client goes away.
func TestThousandWaitersServe(t *testing.T) {
	const n = 1000
	s, obs := waitServer(t, "max_waiting: 1000\nmax_waiting_per_key: 1000\n"+waitYAML)
	h := s.Handler()
	h.ServeHTTP(httptest.NewRecorder(), checkReq(context.Background(), `{"policy":"slow","key":"all"}`))
	var before, after runtime.MemStats
	settledMemStats(&before)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	recs := make([]*httptest.ResponseRecorder, n)
	for i := range n {
		recs[i] = httptest.NewRecorder()
		r := checkReq(ctx, `{"policy":"slow","key":"all"}`)
		wg.Go(func() { h.ServeHTTP(recs[i], r) })
	}
	waitUntil(t, "a thousand waiters", func() bool { return s.waiters.Waiting() == n })
	settledMemStats(&after)
	calls := obs.n.Load()
	time.Sleep(200 * time.Millisecond)
	if got := obs.n.Load(); got != calls || calls != n+1 {
		t.Fatalf("decisions: %d once all waited, %d 200ms later; want %d (one each), unchanged", calls, got, n+1)
	}
	perWaiter := (int64(after.HeapAlloc+after.StackInuse) - int64(before.HeapAlloc+before.StackInuse)) / n
	t.Logf("%d waiters: %d bytes each (live heap and stacks, request and recorder included)", n, perWaiter)
	if perWaiter > 64<<10 {
		t.Errorf("%d bytes per waiter, want under 64 KiB", perWaiter)
	}
	cancel()
	wg.Wait()
	if s.waiters.Waiting() != 0 {
		t.Fatalf("waiting %d after every client left", s.waiters.Waiting())
	}
	if got := waits(s, "slow.gcra", waitAbandoned); got != n {
		t.Fatalf("abandoned %d, want %d", got, n)
	}
}

// TestWaitMetricsServe: /metrics has sluice_server_waits_total and
// sluice_server_waiting.
func TestWaitMetricsServe(t *testing.T) {
	s, _ := waitServer(t, waitYAML)
	serveCheck(s, context.Background(), `{"policy":"short","key":"k"}`)
	serveCheck(s, context.Background(), `{"policy":"short","key":"k"}`)
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(w.Body)
	for _, line := range []string{`sluice_server_waits_total{limiter="short.gcra",outcome="refused"} 1`, "sluice_server_waiting 0"} {
		if !strings.Contains(string(body), line) {
			t.Errorf("/metrics lacks %s", line)
		}
	}
}

// settledMemStats reads m once collections stop freeing memory: an
// earlier test's limiters free their deny caches only after a cleanup,
// which runs after a collection, has stopped their watch.
func settledMemStats(m *runtime.MemStats) {
	runtime.GC()
	runtime.ReadMemStats(m)
	for range 20 {
		last := m.HeapAlloc
		time.Sleep(10 * time.Millisecond) // the cleanups run
		runtime.GC()
		runtime.ReadMemStats(m)
		if m.HeapAlloc >= last {
			return
		}
	}
}

// TestWaitStopServe: when the server stops (StopWaiting), a waiting
// request is answered with its refusal at once, and a request refused
// after that does not wait; both count as refused.
func TestWaitStopServe(t *testing.T) {
	s, _ := waitServer(t, waitYAML)
	ctx := context.Background()
	serveCheck(s, ctx, `{"policy":"slow","key":"k"}`)
	answer := make(chan *httptest.ResponseRecorder, 1)
	go func() { answer <- serveCheck(s, ctx, `{"policy":"slow","key":"k"}`) }()
	waitUntil(t, "the waiter", func() bool { return s.waiters.Waiting() == 1 })
	s.StopWaiting()
	if w := <-answer; w.Code != 200 || allowed(w) || !strings.Contains(w.Body.String(), `"retry_after_ms":`) {
		t.Fatalf("the waiter after StopWaiting: %d %s", w.Code, w.Body)
	}
	if w := serveCheck(s, ctx, `{"policy":"slow","key":"k"}`); allowed(w) || s.waiters.Waiting() != 0 {
		t.Fatalf("after StopWaiting: %s, %d waiting", w.Body, s.waiters.Waiting())
	}
	if got := waits(s, "slow.gcra", waitRefused); got != 2 {
		t.Fatalf("refused %d, want 2", got)
	}
	s.StopWaiting() // twice is harmless
}

// TestWaitPlaces: a request takes one waiting place per refusing policy
// and key, a key checked twice taking one.
func TestWaitPlaces(t *testing.T) {
	a := &policy{cfg: &config.Policy{Limiter: "a.gcra"}}
	b := &policy{cfg: &config.Policy{Limiter: "b.gcra"}}
	no, ok := sluice.Result{}, sluice.Result{Allowed: true}
	got := waitPlaces([]*policy{a, a, b, b, a}, []string{"k", "k", "k", "m", "m"}, []sluice.Result{no, no, no, ok, no})
	want := []waitKey{{"a.gcra", "k"}, {"b.gcra", "k"}, {"a.gcra", "m"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%v, want %v", got, want)
	}
}

// TestWaitNextProperty compares wait.next, on random refusals (a few
// checks, each allowed or refused with a random RetryAfter, of policies
// with and without wait, peeks among them) after a random time waited,
// with a plain reference: sleep the longest RetryAfter of the refusing
// checks (at least 1ms), unless the time waited and that sleep pass the
// least wait of the refusing checks (a peek's being 0).
func TestWaitNextProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	waits := []time.Duration{0, time.Millisecond, 50 * time.Millisecond, time.Second, time.Minute}
	for range 20000 {
		n := 1 + rng.IntN(4)
		w := wait[sluice.Decision]{}
		res := make([]sluice.Result, n)
		refused := false
		for i := range n {
			w.pols = append(w.pols, &policy{cfg: &config.Policy{Wait: waits[rng.IntN(len(waits))]}})
			w.costs = append(w.costs, int64(rng.IntN(3)))
			res[i] = sluice.Result{Allowed: rng.IntN(3) == 0, RetryAfter: time.Duration(rng.Int64N(int64(2 * time.Second)))}
			if res[i].Allowed {
				res[i].RetryAfter = 0
			}
			refused = refused || !res[i].Allowed
		}
		if !refused {
			continue
		}
		elapsed := time.Duration(rng.Int64N(int64(2 * time.Second)))
		// The reference.
		var longest time.Duration
		least := time.Duration(1 << 62)
		for i := range n {
			if res[i].Allowed {
				continue
			}
			if res[i].RetryAfter > longest {
				longest = res[i].RetryAfter
			}
			b := w.pols[i].cfg.Wait
			if w.costs[i] == 0 {
				b = 0
			}
			if b < least {
				least = b
			}
		}
		if longest < time.Millisecond {
			longest = time.Millisecond
		}
		wantSleep := elapsed+longest <= least
		delay, ok := w.next(elapsed, res, 0)
		if delay != longest || ok != wantSleep {
			t.Fatalf("elapsed %v, results %+v, costs %v: next %v %v, want %v %v", elapsed, res, w.costs, delay, ok, longest, wantSleep)
		}
	}
}

// TestWaitNextEdge: the bound is inclusive, to the nanosecond: a wait
// that ends exactly at it sleeps, one a nanosecond past it does not.
func TestWaitNextEdge(t *testing.T) {
	w := wait[sluice.Decision]{pols: []*policy{{cfg: &config.Policy{Wait: time.Second}}}, costs: []int64{1}}
	res := []sluice.Result{{RetryAfter: 300 * time.Millisecond}}
	if d, ok := w.next(700*time.Millisecond, res, 0); d != 300*time.Millisecond || !ok {
		t.Fatalf("at the bound: %v %v", d, ok)
	}
	if _, ok := w.next(700*time.Millisecond+1, res, 0); ok {
		t.Fatal("a nanosecond past the bound sleeps")
	}
	if d, ok := w.next(0, []sluice.Result{{}}, 0); d != time.Millisecond || !ok {
		t.Fatalf("a refusal without RetryAfter: %v %v, want 1ms", d, ok)
	}
}
