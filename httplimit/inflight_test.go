package httplimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// inFlightServer serves h behind an in-flight limit of limit and lease on
// the constant key "all", beside a rate limit.
func inFlightServer(t *testing.T, limit int64, lease time.Duration, h http.HandlerFunc) (*httptest.Server, *sluice.Limiter) {
	t.Helper()
	st := memstore.New()
	l, err := sluice.New(st, sluice.InFlight{Limit: limit, Lease: lease}, sluice.WithName("exports"))
	if err != nil {
		t.Fatal(err)
	}
	rate, err := sluice.New(st, sluice.TokenBucket{Capacity: 1000, Rate: 1000, Per: time.Second}, sluice.WithName("api"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := httplimit.New(httplimit.Config{Limits: []httplimit.Limit{
		{Limiter: l, Key: httplimit.Constant("all")},
		{Limiter: rate, Key: httplimit.Constant("all")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler(h))
	t.Cleanup(srv.Close)
	return srv, l
}

func get(t *testing.T, ctx context.Context, url string) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

// waitFree waits until l's key "all" has n free slots.
func waitFree(t *testing.T, l *sluice.Limiter, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := l.Peek(context.Background(), sluice.Identity("const", "all"))
		if err == nil && res.Remaining == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("key has %d free slots, want %d (%v)", res.Remaining, n, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestInFlightMiddleware: at most Limit requests at once; the others get
// 429 with Retry-After and no rate-limit headers of the in-flight limit;
// a request's lease is released when its handler returns or panics, and
// when its client goes away.
func TestInFlightMiddleware(t *testing.T) {
	release := make(chan struct{})
	ignored := make(chan struct{})
	defer close(ignored)
	entered := make(chan struct{}, 10)
	srv, l := inFlightServer(t, 2, time.Minute, func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		switch r.URL.Path {
		case "/panic":
			panic(http.ErrAbortHandler)
		case "/ignore":
			<-ignored // ignores its context: the client leaves first
			return
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	ctx := context.Background()
	done := make(chan error, 2)
	for range 2 {
		go func() { _, err := get(t, ctx, srv.URL+"/hold"); done <- err }()
		<-entered
	}
	resp, err := get(t, ctx, srv.URL+"/third")
	if err != nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a third request: %v %v", resp, err)
	}
	if p := resp.Header.Get("RateLimit-Policy"); strings.Contains(p, "exports") {
		t.Errorf("RateLimit-Policy shows the in-flight limit: %q", p)
	}
	close(release)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	waitFree(t, l, 2)
	// A handler that panics releases its lease.
	if _, err := get(t, ctx, srv.URL+"/panic"); err == nil {
		t.Log("the panic's response reached the client")
	}
	<-entered
	waitFree(t, l, 2)
	// A client that goes away releases the lease, even while the handler
	// still runs.
	cctx, cancel := context.WithCancel(ctx)
	go get(t, cctx, srv.URL+"/ignore")
	<-entered
	waitFree(t, l, 1)
	cancel()
	waitFree(t, l, 2)
}

// TestInFlightMiddlewareRenewal: a handler that outlives the Lease keeps
// its slot (renewed), and one whose lease is lost (the key reset) sees its
// request context canceled with ErrLeaseLost as the cause.
func TestInFlightMiddlewareRenewal(t *testing.T) {
	const lease = 300 * time.Millisecond
	causes := make(chan error, 1)
	srv, l := inFlightServer(t, 1, lease, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/long" {
			time.Sleep(3 * lease)
			return
		}
		<-r.Context().Done()
		causes <- context.Cause(r.Context())
	})
	ctx := context.Background()
	done := make(chan struct{})
	go func() { get(t, ctx, srv.URL+"/long"); close(done) }()
	waitFree(t, l, 0)
	time.Sleep(2 * lease) // past the Lease: renewed
	if res, _ := l.Peek(ctx, sluice.Identity("const", "all")); res.Allowed {
		t.Fatal("a handler outliving its Lease lost its slot")
	}
	<-done
	waitFree(t, l, 1)
	go get(t, ctx, srv.URL+"/wait")
	waitFree(t, l, 0)
	if err := l.Reset(ctx, sluice.Identity("const", "all")); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, sluice.ErrLeaseLost) {
			t.Fatalf("cause %v, want ErrLeaseLost", cause)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the request's context was not canceled when its lease was lost")
	}
}

// TestInFlightWait: a request an in-flight limit refuses, with Wait, waits
// for a slot to be freed (a release, long before RetryAfter, the end of
// the current lease at the latest) and is admitted; when no slot is freed
// within Wait it is refused once Wait has passed, not at once.
func TestInFlightWait(t *testing.T) {
	l, err := sluice.New(memstore.New(), sluice.InFlight{Limit: 1, Lease: time.Minute}, sluice.WithName("exports"))
	if err != nil {
		t.Fatal(err)
	}
	wait := 2 * time.Second
	m, err := httplimit.New(httplimit.Config{Limits: []httplimit.Limit{{Limiter: l, Key: httplimit.Constant("all"), Wait: wait}}})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		if r.URL.Path == "/hold" {
			<-release
		}
	})))
	defer srv.Close()
	ctx := context.Background()
	held := make(chan error, 1)
	go func() { _, err := get(t, ctx, srv.URL+"/hold"); held <- err }()
	<-entered
	go func() { time.Sleep(100 * time.Millisecond); close(release) }()
	start := time.Now()
	resp, err := get(t, ctx, srv.URL+"/waits")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a request waiting for the slot: %v %v, want 200 once the holder released it", resp, err)
	}
	if took := time.Since(start); took < 50*time.Millisecond || took > wait {
		t.Errorf("admitted after %v: the slot was freed after about 100ms", took)
	}
	<-held
	<-entered

	// The slot held for good: refused once Wait has passed.
	m, err = httplimit.New(httplimit.Config{Limits: []httplimit.Limit{{Limiter: l, Key: httplimit.Constant("all"), Wait: 200 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	srv2 := httptest.NewServer(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv2.Close()
	ls, _, err := l.Acquire(ctx, sluice.Identity("const", "all"))
	if err != nil || ls == nil {
		t.Fatalf("Acquire: %v %v", ls, err)
	}
	defer ls.Release(ctx)
	start = time.Now()
	resp, err = get(t, ctx, srv2.URL+"/refused")
	if err != nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a request while the slot stays held: %v %v, want 429", resp, err)
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Errorf("refused after %v, want after Wait (200ms): a release might have freed a slot meanwhile", took)
	}
}
