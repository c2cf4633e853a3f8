package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/sluicehq/sluice/valkeytest/syncbuf"
)

func TestMain(m *testing.M) { valkeytest.Main(m) }

func do(t *testing.T, method, u string, form url.Values, headers ...string) int {
	t.Helper()
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Add(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func codes(t *testing.T, n int, f func() int) string {
	t.Helper()
	var s []string
	for range n {
		s = append(s, http.StatusText(f()))
	}
	return strings.Join(s, ",")
}

// exercise runs the service's routes at base.
func exercise(t *testing.T, base string) {
	t.Helper()
	ok, tooMany := http.StatusText(200), http.StatusText(429)
	hello := func(h ...string) func() int { return func() int { return do(t, "GET", base+"/api/hello", nil, h...) } }

	// 10 a minute per address; a spoofed X-Forwarded-For does not help.
	if got := codes(t, 10, hello()); got != strings.Repeat(ok+",", 9)+ok {
		t.Fatalf("anonymous: %s", got)
	}
	if got := codes(t, 2, hello("X-Forwarded-For: 203.0.113.9")); got != tooMany+","+tooMany {
		t.Fatalf("spoofed X-Forwarded-For: %s", got)
	}
	// An API key has its own budget.
	if got := codes(t, 3, hello("X-API-Key: k1")); got != ok+","+ok+","+ok {
		t.Fatalf("API key: %s", got)
	}
	// Health checks are never limited.
	if got := codes(t, 12, func() int { return do(t, "GET", base+"/healthz", nil) }); strings.Contains(got, tooMany) {
		t.Fatalf("healthz: %s", got)
	}
	// Search: 3 a minute.
	if got := codes(t, 4, func() int { return do(t, "GET", base+"/api/search?q=x", nil) }); got != ok+","+ok+","+ok+","+tooMany {
		t.Fatalf("search: %s", got)
	}
	// Login: 5 attempts per username.
	login := func(user, pass string) func() int {
		return func() int {
			return do(t, "POST", base+"/login", url.Values{"username": {user}, "password": {pass}})
		}
	}
	if got := login("Demo", "demo-password")(); got != 200 {
		t.Fatalf("good login: %d", got)
	}
	unauth := http.StatusText(401)
	want := strings.Repeat(unauth+",", 5) + tooMany
	if got := codes(t, 6, login("demo", "wrong")); got != want {
		t.Fatalf("guessing demo: %s", got)
	}
	if got := codes(t, 6, login("nobody", "wrong")); got != want {
		t.Fatalf("guessing an unknown user: %s", got)
	}
}

func TestService(t *testing.T) {
	h, err := newHandler(memstore.New(), clientip.MustNew(clientip.Config{}), []byte("0123456789abcdef"), map[string]string{"demo": "demo-password"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	exercise(t, srv.URL)
}

// The program starts while nothing answers at VALKEY_ADDR, and serves
// meanwhile: its limits fail open.
func TestRunValkeyDown(t *testing.T) {
	env := map[string]string{"VALKEY_ADDR": valkeytest.ClosedAddr(t), "ADDR": "127.0.0.1:0"}
	ctx, cancel := context.WithCancel(context.Background())
	var out syncbuf.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, func(k string) string { return env[k] }, &out) }()
	var base string
	for deadline := time.Now().Add(10 * time.Second); base == ""; {
		if _, after, ok := strings.Cut(out.String(), "listening on "); ok {
			base, _, _ = strings.Cut(after, " ")
			break
		}
		select {
		case err := <-done:
			t.Fatalf("run ended with Valkey down: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("service did not start with Valkey down:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := http.Get(base + "/api/hello")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /api/hello with Valkey down: %d, want 200 (the limits fail open)", resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}

// The whole program against a real Valkey, as `VALKEY_ADDR=... go run
// ./examples/httpservice` runs it.
func TestRunValkey(t *testing.T) {
	srv := valkeytest.Shared(t)
	env := map[string]string{"VALKEY_ADDR": srv.Addr, "ADDR": "127.0.0.1:0", "TRUSTED_PROXIES": "10.0.0.0/8"}
	ctx, cancel := context.WithCancel(context.Background())
	var out syncbuf.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, func(k string) string { return env[k] }, &out) }()

	var base string
	for deadline := time.Now().Add(10 * time.Second); base == ""; {
		if _, after, ok := strings.Cut(out.String(), "listening on "); ok {
			base, _, _ = strings.Cut(after, " ")
			break
		}
		select {
		case err := <-done:
			t.Fatalf("run ended early: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("service did not start:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "Valkey at "+srv.Addr) {
		t.Fatalf("not on Valkey: %s", out.String())
	}
	// It listens before it has connected; the exercise wants Valkey's
	// decisions.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "connected to valkey"); {
		if time.Now().After(deadline) {
			t.Fatalf("not connected to Valkey 10s after start:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	exercise(t, base)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}
