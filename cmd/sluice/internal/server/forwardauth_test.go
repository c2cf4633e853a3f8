package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/valkeytest/syncbuf"
)

const fwdYAML = `
policies:
  - {name: api, algorithm: token_bucket, burst: 3, rate: 1/h, on_failure: allow}
  - {name: login, algorithm: sliding_log, limit: 2, window: 15m, on_failure: deny, headers: [retry-after]}
  - {name: user, algorithm: fixed_window, limit: 2, window: 1h}
forward_auth:
  trusted_proxies: [10.0.0.0/8]
  routes:
    - name: login
      path_prefix: /login
      methods: [POST]
      limits: [{policy: login, key: client_ip}]
    - name: me
      path_prefix: /me
      limits: [{policy: user, key: claim:X-User}]
    - name: api
      host: api.example.com
      path_prefix: /v1/
      limits: [{policy: api, key: [header:X-API-Key, client_ip]}]
`

// fwdServer returns a Server for yaml over store (nil: memstore).
func fwdServer(t testing.TB, yaml string, store driver.Store) *Server {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if store == nil {
		store = memstore.New()
	}
	s, err := New(cfg, Options{Store: store, StoreName: "test", Logger: quietLogger(), Env: testEnv})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ask sends one forward-auth request from peer, with header pairs.
func ask(s *Server, path, peer string, hdr ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.RemoteAddr = peer + ":40000"
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	return w
}

// fwd asks /v1/forward-auth as Traefik or Caddy would, from a trusted proxy.
func fwd(s *Server, method, host, uri, client string, hdr ...string) *httptest.ResponseRecorder {
	return ask(s, "/v1/forward-auth", "10.0.0.1", append([]string{
		"X-Forwarded-Method", method, "X-Forwarded-Host", host, "X-Forwarded-Uri", uri, "X-Forwarded-For", client}, hdr...)...)
}

// hget reads a header as the server spells it (rate-limit headers are
// written as the drafts spell them, not canonicalized).
func hget(w *httptest.ResponseRecorder, name string) string {
	if v := w.Header()[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func policyOf(w *httptest.ResponseRecorder) string {
	if p := hget(w, "RateLimit-Policy"); p != "" {
		return strings.Trim(strings.SplitN(p, ";", 2)[0], `"`)
	}
	return ""
}

// TestForwardAuthRoutes: the first route whose conditions hold and whose
// limits all find a key decides; the rest is unmatched (allowed, no limit).
func TestForwardAuthRoutes(t *testing.T) {
	s := fwdServer(t, fwdYAML, nil)
	for _, c := range []struct {
		name, method, host, uri string
		hdr                     []string
		wantCode                int
		wantRetry               bool // login's headers: retry-after only
		wantPolicy              string
	}{
		{"api by header", "GET", "api.example.com", "/v1/items?x=1", []string{"X-API-Key", "k1"}, 200, false, "api"},
		{"api by client ip", "GET", "API.example.com:443", "/v1/items", nil, 200, false, "api"},
		{"api: /v1 itself", "GET", "api.example.com", "/v1", nil, 200, false, "api"},
		{"api: other host", "GET", "www.example.com", "/v1/items", nil, 200, false, ""},
		{"api: /v1x is not under /v1/", "GET", "api.example.com", "/v1x", nil, 200, false, ""},
		{"login needs POST", "GET", "www.example.com", "/login", nil, 200, false, ""},
		{"me without the claim: unmatched", "GET", "www.example.com", "/me", nil, 200, false, ""},
		{"me with the claim", "GET", "www.example.com", "/me/settings", []string{"X-User", "alice"}, 200, false, "user"},
	} {
		w := fwd(s, c.method, c.host, c.uri, "192.0.2.1", c.hdr...)
		if w.Code != c.wantCode || policyOf(w) != c.wantPolicy {
			t.Errorf("%s: %d policy %q, want %d %q (headers %v)", c.name, w.Code, policyOf(w), c.wantCode, c.wantPolicy, w.Header())
		}
	}
}

// TestForwardAuthRefusal: refused is 429 (403 for nginx) with Retry-After,
// and the paths an attacker might use to dodge a route are matched as the
// proxy routes them.
func TestForwardAuthRefusal(t *testing.T) {
	s := fwdServer(t, fwdYAML, nil)
	// Two logins allowed, in any spelling of /login.
	for _, uri := range []string{"/login", "/x/../login?next=/"} {
		if w := fwd(s, "POST", "h", uri, "192.0.2.7"); w.Code != 200 {
			t.Fatalf("%s: %d, want 200", uri, w.Code)
		}
	}
	for _, uri := range []string{"/login", "//login", "/%6Cogin", "/./login/", "/a/b/../../login"} {
		w := fwd(s, "POST", "h", uri, "192.0.2.7")
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
			t.Errorf("%s: %d Retry-After %q, want 429 with Retry-After", uri, w.Code, w.Header().Get("Retry-After"))
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%s: Content-Type %q", uri, ct)
		}
	}
	// nginx: 403, same Retry-After, from X-Original-*.
	w := ask(s, "/v1/forward-auth/nginx", "10.0.0.1", "X-Original-Method", "POST", "X-Original-URI", "/login",
		"X-Original-Host", "h", "X-Forwarded-For", "192.0.2.7")
	if w.Code != http.StatusForbidden || w.Header().Get("Retry-After") == "" {
		t.Errorf("nginx: %d Retry-After %q, want 403 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	// Another client is not affected.
	if w := fwd(s, "POST", "h", "/login", "192.0.2.8"); w.Code != 200 {
		t.Errorf("another client: %d", w.Code)
	}
}

// TestForwardAuthUntrustedPeer: a request from outside trusted_proxies is
// judged as itself: its own address is the key, its forwarded method, URI,
// host, client address and claims are ignored.
func TestForwardAuthUntrustedPeer(t *testing.T) {
	s := fwdServer(t, `
policies:
  - {name: all, algorithm: fixed_window, limit: 2, window: 1h}
  - {name: me, algorithm: fixed_window, limit: 1, window: 1h}
forward_auth:
  trusted_proxies: [10.0.0.0/8]
  routes:
    - {path_prefix: /me, limits: [{policy: me, key: claim:X-User}]}
    - {limits: [{policy: all, key: client_ip}]}
`, nil)
	spoof := func(xff string) *httptest.ResponseRecorder {
		return ask(s, "/v1/forward-auth", "203.0.113.5", "X-Forwarded-For", xff, "X-Forwarded-Uri", "/me", "X-User", "bob")
	}
	// Each request claims another client: all count against 203.0.113.5.
	if w := spoof("198.51.100.1"); w.Code != 200 || policyOf(w) != "all" || hget(w, "X-RateLimit-Remaining") != "1" {
		t.Fatalf("first: %d %q %v", w.Code, policyOf(w), w.Header())
	}
	if w := spoof("198.51.100.2"); w.Code != 200 {
		t.Fatalf("second: %d", w.Code)
	}
	if w := spoof("198.51.100.3"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("third with yet another X-Forwarded-For: %d, want 429 (the peer's own budget)", w.Code)
	}
	// From the trusted proxy the same headers are believed.
	w := ask(s, "/v1/forward-auth", "10.0.0.9", "X-Forwarded-For", "198.51.100.3", "X-Forwarded-Uri", "/me", "X-User", "bob")
	if w.Code != 200 || policyOf(w) != "me" || hget(w, "X-RateLimit-Limit") != "1" {
		t.Errorf("trusted: %d %v, want the me route (limit 1)", w.Code, w.Header())
	}
}

// TestForwardAuthUnmatched: no route applies: allowed without limit by
// default, refused with unmatched: deny (no Retry-After: waiting will not help).
func TestForwardAuthUnmatched(t *testing.T) {
	yaml := `
policies: [{name: api, algorithm: gcra, burst: 1, rate: 1/h}]
forward_auth:
  trusted_proxies: [10.0.0.0/8]
  unmatched: %s
  routes: [{path_prefix: /api, limits: [{policy: api, key: client_ip}]}]
`
	for _, c := range []struct {
		mode       string
		path       string
		want       int
		wantHeader bool
	}{
		{"allow", "/v1/forward-auth", 200, false},
		{"allow", "/v1/forward-auth/nginx", 200, false},
		{"deny", "/v1/forward-auth", 429, false},
		{"deny", "/v1/forward-auth/nginx", 403, false},
	} {
		s := fwdServer(t, strings.Replace(yaml, "%s", c.mode, 1), nil)
		w := ask(s, c.path, "10.0.0.1", "X-Forwarded-Uri", "/other", "X-Original-URI", "/other", "X-Forwarded-For", "192.0.2.1")
		if w.Code != c.want || w.Header().Get("Retry-After") != "" || hget(w, "X-RateLimit-Limit") != "" {
			t.Errorf("unmatched: %s, %s: %d %v, want %d without rate-limit headers", c.mode, c.path, w.Code, w.Header(), c.want)
		}
	}
	// Without a forward_auth section the endpoints are off: 404.
	s := fwdServer(t, "policies: [{name: api, algorithm: gcra, burst: 1, rate: 1/h}]\n", nil)
	if w := ask(s, "/v1/forward-auth", "10.0.0.1"); w.Code != 404 {
		t.Errorf("without forward_auth: %d, want 404", w.Code)
	}
}

type downStore struct{}

func (*downStore) Do(ctx context.Context, batch []driver.Op) error {
	for i := range batch {
		batch[i].Err = errors.New("store down")
	}
	return nil
}
func (*downStore) Delete(context.Context, ...string) error { return errors.New("store down") }

// TestForwardAuthDegraded: when the store cannot decide, each policy's
// on_failure decides; degraded answers carry no rate-limit headers, and a
// degraded refusal carries Retry-After.
func TestForwardAuthDegraded(t *testing.T) {
	s := fwdServer(t, fwdYAML, &downStore{})
	w := fwd(s, "GET", "api.example.com", "/v1/x", "192.0.2.1") // api: on_failure allow
	if w.Code != 200 || hget(w, "X-RateLimit-Limit") != "" {
		t.Errorf("fail open: %d %v, want 200 without rate-limit headers", w.Code, w.Header())
	}
	w = fwd(s, "POST", "h", "/login", "192.0.2.1") // login: on_failure deny
	if w.Code != 429 || w.Header().Get("Retry-After") == "" {
		t.Errorf("fail closed: %d %v, want 429 with Retry-After", w.Code, w.Header())
	}
	w = ask(s, "/v1/forward-auth/nginx", "10.0.0.1", "X-Original-Method", "POST", "X-Original-URI", "/login", "X-Forwarded-For", "192.0.2.1")
	if w.Code != 403 || w.Header().Get("Retry-After") == "" {
		t.Errorf("fail closed, nginx: %d %v, want 403 with Retry-After", w.Code, w.Header())
	}
}

// TestForwardAuthSeveralLimits: a route with two limits refuses when either
// does, and takes nothing from the other then.
func TestForwardAuthSeveralLimits(t *testing.T) {
	s := fwdServer(t, `
policies:
  - {name: user, algorithm: fixed_window, limit: 1, window: 1h}
  - {name: ip, algorithm: fixed_window, limit: 3, window: 1h}
forward_auth:
  trusted_proxies: [10.0.0.0/8]
  routes: [{limits: [{policy: user, key: header:X-User}, {policy: ip, key: client_ip}]}]
`, nil)
	if w := fwd(s, "GET", "h", "/", "192.0.2.1", "X-User", "a"); w.Code != 200 || hget(w, "X-RateLimit-Remaining") != "0" {
		t.Fatalf("first: %d %v (the binding limit is user, 0 left)", w.Code, w.Header())
	}
	w := fwd(s, "GET", "h", "/", "192.0.2.1", "X-User", "a")
	if w.Code != 429 || !strings.Contains(w.Body.String(), `\"user\"`) {
		t.Fatalf("second: %d %s, want 429 by user", w.Code, w.Body)
	}
	// The refusal gave back the ip unit: two more users fit in ip's 3.
	for _, u := range []string{"b", "c"} {
		if w := fwd(s, "GET", "h", "/", "192.0.2.1", "X-User", u); w.Code != 200 {
			t.Fatalf("user %s: %d", u, w.Code)
		}
	}
	if w := fwd(s, "GET", "h", "/", "192.0.2.1", "X-User", "d"); w.Code != 429 || !strings.Contains(w.Body.String(), `\"ip\"`) {
		t.Fatalf("fourth user: %d %s, want 429 by ip", w.Code, w.Body)
	}
}

// TestForwardAuthSpellings: the spellings of /login that common backends
// serve as /login are counted by the login route, not the looser one after
// it; a path with a control character is refused (403 for nginx, whose
// auth_request would turn a 400 into a 500).
func TestForwardAuthSpellings(t *testing.T) {
	s := fwdServer(t, fwdYAML, nil)
	for i := 0; i < 2; i++ {
		if w := fwd(s, "POST", "h", "/login", "192.0.2.9"); w.Code != 200 {
			t.Fatalf("login %d: %d", i, w.Code)
		}
	}
	for _, uri := range []string{"/LOGIN", "/Login", "/%4Cogin", "/login;jsessionid=1", "/login%3Bx=1", "/%5Clogin", "/LOGIN/;a=b"} {
		if w := fwd(s, "POST", "h", uri, "192.0.2.9"); w.Code != 429 || !strings.Contains(w.Body.String(), `\"login\"`) {
			t.Errorf("%s: %d %s, want 429 by login", uri, w.Code, w.Body)
		}
	}
	for _, c := range []struct{ endpoint, hdr string }{{"/v1/forward-auth", "X-Forwarded-Uri"}, {"/v1/forward-auth/nginx", "X-Original-Uri"}} {
		want := 400
		if strings.HasSuffix(c.endpoint, "nginx") {
			want = 403
		}
		for _, uri := range []string{"/login%00", "/login\x00", "/log%0Ain", "/api/%7f"} {
			w := ask(s, c.endpoint, "10.0.0.1", c.hdr, uri, "X-Forwarded-Method", "POST", "X-Original-Method", "POST", "X-Forwarded-For", "192.0.2.10")
			if w.Code != want || !strings.Contains(w.Body.String(), "control character") || w.Header().Get("Retry-After") != "" {
				t.Errorf("%s %q: %d %s, want %d naming the control character", c.endpoint, uri, w.Code, w.Body, want)
			}
		}
	}
	// path_case: sensitive keeps case: /LOGIN is not the login route then.
	sens := fwdServer(t, strings.Replace(fwdYAML, "trusted_proxies: [10.0.0.0/8]", "trusted_proxies: [10.0.0.0/8]\n  path_case: sensitive", 1), nil)
	for i := 0; i < 3; i++ {
		if w := fwd(sens, "POST", "h", "/LOGIN", "192.0.2.9"); w.Code != 200 || policyOf(w) != "" {
			t.Fatalf("path_case sensitive, /LOGIN %d: %d policy %q, want unmatched", i, w.Code, policyOf(w))
		}
	}
}

// TestForwardAuthAllKeys: key {all: [client_ip, header:X-API-Key]} counts
// the address and the key: a client that sends a new key on every request
// is refused once its address is over, and one key used from many
// addresses once the key is over. The list form counts only the first.
func TestForwardAuthAllKeys(t *testing.T) {
	const yaml = `
policies: [{name: api, algorithm: fixed_window, limit: 3, window: 1h}]
forward_auth:
  trusted_proxies: [10.0.0.0/8]
  routes: [{limits: [{policy: api, key: KEY}]}]
`
	all := fwdServer(t, strings.Replace(yaml, "KEY", "{all: [client_ip, header:X-API-Key]}", 1), nil)
	first := fwdServer(t, strings.Replace(yaml, "KEY", "[header:X-API-Key, client_ip]", 1), nil)
	allowed := func(s *Server, client, key string) bool {
		w := fwd(s, "GET", "h", "/", client, "X-API-Key", key)
		if w.Code != 200 && w.Code != 429 {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
		return w.Code == 200
	}
	n, m := 0, 0
	for i := 0; i < 10; i++ {
		if allowed(all, "192.0.2.1", fmt.Sprint("random-", i)) {
			n++
		}
		if allowed(first, "192.0.2.1", fmt.Sprint("random-", i)) {
			m++
		}
	}
	if n != 3 || m != 10 {
		t.Errorf("a new key on each request: all let %d of 10 through (want 3, the address's limit), the list form %d (want 10)", n, m)
	}
	n = 0
	for i := 0; i < 10; i++ {
		if allowed(all, fmt.Sprint("198.51.100.", i+1), "shared") {
			n++
		}
	}
	if n != 3 {
		t.Errorf("one key from 10 addresses: %d allowed, want 3 (the key's limit)", n)
	}
	// A request without the header is counted by address alone.
	w := fwd(all, "GET", "h", "/", "203.0.113.1")
	if w.Code != 200 || hget(w, "X-RateLimit-Remaining") != "2" {
		t.Errorf("without the header: %d %v", w.Code, w.Header())
	}
}

// FuzzForwardAuth: whatever a proxy or a peer sends, the answer is 200,
// 403 or 429 (400 for a path with a control character), never a 500.
func FuzzForwardAuth(f *testing.F) {
	f.Add("/v1/forward-auth", "10.0.0.1:1", "POST", "/login", "h", "192.0.2.1", "k")
	f.Add("/v1/forward-auth/nginx", "10.0.0.1:1", "", "/%zz/../login", "", "", "")
	f.Add("/v1/forward-auth", "[::1]:1", "get", "http://x/v1/a", "api.example.com:99", "2001:db8::1, junk", "\x00")
	f.Add("/v1/forward-auth", "@", "", "", "[::1", ",,,", "")
	s := fwdServer(f, fwdYAML, nil)
	f.Fuzz(func(t *testing.T, path, peer, method, uri, host, xff, key string) {
		if path != "/v1/forward-auth/nginx" {
			path = "/v1/forward-auth"
		}
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.RemoteAddr = peer
		for k, v := range map[string]string{"X-Forwarded-Method": method, "X-Original-Method": method,
			"X-Forwarded-Uri": uri, "X-Original-URI": uri, "X-Forwarded-Host": host, "X-Original-Host": host,
			"X-Forwarded-For": xff, "X-API-Key": key, "X-User": key} {
			req.Header[http.CanonicalHeaderKey(k)] = []string{v}
		}
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, req)
		if w.Code != 200 && w.Code != 403 && w.Code != 429 && (w.Code != 400 || path == "/v1/forward-auth/nginx") {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
	})
}

// TestForwardAuthWarningLogged: sluice serve logs config.Warnings at load.
func TestForwardAuthWarningLogged(t *testing.T) {
	cfg, err := config.Parse("w.yaml", []byte("policies: [{name: api, algorithm: gcra, burst: 1, rate: 1/s}]\nforward_auth:\n  trusted_proxies: [10.0.0.1]\n  routes: [{name: keyed, limits: [{policy: api, key: header:X-API-Key}]}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	var buf syncbuf.Buffer
	if _, err := New(cfg, Options{Store: memstore.New(), Logger: slog.New(slog.NewTextHandler(&buf, nil)), Env: testEnv}); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "w.yaml:4: forward_auth route keyed:") {
		t.Errorf("log %q, want the warning", out)
	}
}

// TestForwardAuthKeyIsCounted: the key ForwardAuthKey computes from a raw
// value is the one forward auth counts (what a reset of that key unlocks),
// for client_ip (IPv4, IPv6 by /64), header:NAME and claim:NAME.
func TestForwardAuthKeyIsCounted(t *testing.T) {
	s := fwdServer(t, fwdYAML, nil)
	fa := s.state.Load().cfg.ForwardAuth
	for _, tc := range []struct {
		src, value                string
		method, host, uri, client string
		hdr                       []string
		policy                    string
	}{
		{"client_ip", "203.0.113.7", "POST", "x", "/login", "203.0.113.7", nil, "login"},
		{"client_ip", "2001:db8:1:2::99", "POST", "x", "/login", "2001:db8:1:2::5", nil, "login"},
		{"header:X-Api-Key", "key_abc", "GET", "api.example.com", "/v1/x", "203.0.113.8", []string{"X-API-Key", "key_abc"}, "api"},
		{"claim:X-User", "alice", "GET", "x", "/me", "203.0.113.9", []string{"X-User", "alice"}, "user"},
	} {
		src, err := config.ParseKeySource(tc.src)
		if err != nil {
			t.Fatal(err)
		}
		key, err := ForwardAuthKey(fa, src, tc.value)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.src, tc.value, err)
		}
		p := s.state.Load().policies[tc.policy]
		before, err := p.limiter.Peek(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if w := fwd(s, tc.method, tc.host, tc.uri, tc.client, tc.hdr...); w.Code != http.StatusOK {
			t.Fatalf("%s: forward auth %d %s", tc.src, w.Code, w.Body)
		}
		after, err := p.limiter.Peek(context.Background(), key)
		if err != nil || after.Remaining != before.Remaining-1 {
			t.Errorf("%s %s: key %q went from %d to %d remaining (%v): not the key counted", tc.src, tc.value, key, before.Remaining, after.Remaining, err)
		}
	}
	if _, err := ForwardAuthKey(fa, config.KeySource{Kind: config.KeyClientIP}, "not-an-address"); err == nil {
		t.Error("client_ip of a non-address accepted")
	}
}
