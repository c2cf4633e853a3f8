package httplimit

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/httplimit/sfvtest"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
)

func TestMain(m *testing.M) { valkeytest.Main(m) }

// valkeySetup returns a store on the shared Valkey, its client, and a key
// prefix of the test's own.
func valkeySetup(t *testing.T) (*valkeystore.Store, valkey.Client, string) {
	t.Helper()
	c := valkeytest.Shared(t).Client(t)
	s, err := valkeystore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	prefix := "rl:t" + strconv.FormatInt(time.Now().UnixNano(), 36)
	return s, c, prefix
}

func get(t *testing.T, url string, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Add(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func keys(t *testing.T, c valkey.Client, pattern string) []string {
	t.Helper()
	ks, err := valkeytest.Keys(context.Background(), c, pattern)
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

// Through a real server and client against a real Valkey: three requests
// allowed, the fourth refused with the right status, headers and body; the
// state is one key per client with a TTL.
func TestEndToEnd(t *testing.T) {
	store, client, prefix := valkeySetup(t)
	perIP, err := sluice.New(store, sluice.SlidingLog{Limit: 3, Window: time.Minute}, sluice.WithName("per-ip"), sluice.WithPrefix(prefix), sluice.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	global, err := sluice.New(store, sluice.TokenBucket{Capacity: 1000, Rate: 100, Per: time.Second}, sluice.WithName("global"), sluice.WithPrefix(prefix), sluice.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	mw, err := New(Config{Limits: []Limit{
		{Limiter: perIP, Key: ClientAddr(nil)},
		{Limiter: global, Key: Constant("all")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, _ := FromContext(r.Context())
		io.WriteString(w, "remaining "+strconv.FormatInt(st.Limits[0].Result.Remaining, 10))
	})))
	defer srv.Close()

	for i := range 3 {
		resp := get(t, srv.URL)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(body) != "remaining "+strconv.Itoa(2-i) {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
		if got := resp.Header.Get("X-RateLimit-Remaining"); got != strconv.Itoa(2-i) {
			t.Fatalf("request %d: X-RateLimit-Remaining %q", i, got)
		}
		h, err := sfvtest.CheckHeaders(resp.Header)
		if err != nil || len(h.Limits) != 2 || len(h.Policies) != 2 {
			t.Fatalf("request %d: RateLimit %q: %v", i, resp.Header.Get(HeaderRateLimit), err)
		}
	}
	resp := get(t, srv.URL)
	if resp.StatusCode != 429 {
		t.Fatalf("4th request: %d", resp.StatusCode)
	}
	if _, err := sfvtest.CheckHeaders(resp.Header); err != nil {
		t.Fatalf("4th request: %v", err)
	}
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || ra < 59 || ra > 60 {
		t.Fatalf("Retry-After %q", resp.Header.Get("Retry-After"))
	}
	var p Problem
	if resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("Content-Type %q", resp.Header.Get("Content-Type"))
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || strings.Join(p.ViolatedPolicies, ",") != "per-ip" {
		t.Fatalf("problem %+v, %v", p, err)
	}

	ttls, err := valkeytest.TTLs(context.Background(), client, prefix+":*")
	if err != nil {
		t.Fatal(err)
	}
	// The per-ip log is there; the token bucket's key may already be gone,
	// since the bucket refills in milliseconds. Every key expires.
	if _, ok := ttls[driver.Key(prefix, perIP.Name(), perIP.Rule(), "ip:127.0.0.1")]; !ok {
		t.Errorf("keys %v: no per-ip key for 127.0.0.1", ttls)
	}
	for k, ttl := range ttls {
		if k != driver.Key(prefix, perIP.Name(), perIP.Rule(), "ip:127.0.0.1") && k != driver.Key(prefix, global.Name(), global.Rule(), "const:all") {
			t.Errorf("unexpected key %s", k)
		}
		if ttl <= 0 || ttl > 2*time.Minute {
			t.Errorf("key %s: TTL %v", k, ttl)
		}
	}
	// The refused request's global unit was given back: 3 taken, not 4.
	res, err := global.Peek(context.Background(), "const:all")
	if err != nil || res.Remaining < 997 {
		t.Errorf("global after refund: %+v %v", res, err)
	}
}

// A client that connects directly and sends X-Forwarded-For (or Forwarded)
// cannot choose its key: every request is counted under its own peer
// address. Through a trusted proxy, the forwarded address is the key.
func TestEndToEndSpoofedForwardedFor(t *testing.T) {
	store, client, prefix := valkeySetup(t)
	l, err := sluice.New(store, sluice.SlidingLog{Limit: 2, Window: time.Minute}, sluice.WithName("api"), sluice.WithPrefix(prefix), sluice.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	serve := func(res *clientip.Resolver) *httptest.Server {
		mw, err := New(Config{Limits: []Limit{{Limiter: l, Key: ClientAddr(res)}}})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
		t.Cleanup(srv.Close)
		return srv
	}

	// The test client connects from 127.0.0.1, which is not a trusted proxy.
	proxies, _ := clientip.ParsePrefixes("10.0.0.0/8")
	untrusted := serve(clientip.MustNew(clientip.Config{TrustedProxies: proxies}))
	codes := ""
	for i := range 4 {
		resp := get(t, untrusted.URL, "X-Forwarded-For: 203.0.113."+strconv.Itoa(i), "Forwarded: for=198.51.100."+strconv.Itoa(i))
		codes += strconv.Itoa(resp.StatusCode) + " "
	}
	if codes != "200 200 429 429 " {
		t.Fatalf("spoofed headers from an untrusted peer: %s", codes)
	}
	if ks := keys(t, client, prefix+":*"); len(ks) != 1 || !strings.Contains(ks[0], "{ip:127.0.0.1}") {
		t.Fatalf("keys %v, want one for 127.0.0.1", ks)
	}

	// Now 127.0.0.1 is the trusted proxy: each forwarded client has its own
	// count, and a lie left of the proxy's entry changes nothing.
	proxies, _ = clientip.ParsePrefixes("127.0.0.0/8")
	trusted := serve(clientip.MustNew(clientip.Config{TrustedProxies: proxies}))
	for i := range 3 {
		resp := get(t, trusted.URL, "X-Forwarded-For: 1.2.3."+strconv.Itoa(i)+", 203.0.113.50")
		if resp.StatusCode != 200 && i < 2 || resp.StatusCode != 429 && i == 2 {
			t.Fatalf("forwarded request %d: %d", i, resp.StatusCode)
		}
	}
	if ks := keys(t, client, driver.Key(prefix, l.Name(), l.Rule(), "ip:203.0.113.50")+"*"); len(ks) != 1 {
		t.Fatalf("keys %v, want one for 203.0.113.50", ks)
	}
	if resp := get(t, trusted.URL, "X-Forwarded-For: 203.0.113.51"); resp.StatusCode != 200 {
		t.Fatalf("another forwarded client: %d", resp.StatusCode)
	}
}
