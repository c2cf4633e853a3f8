package httplimit

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/memstore"
)

// TestMissingKeyRefusedByDefault: under the README's configuration as it
// was (a per-client, a per-API-key and a global limit, nothing said about
// requests without the key), a request without X-API-Key is not let past
// the per-key limit: it is refused with 400 and a problem+json body naming
// the limit, and counts against nothing.
func TestMissingKeyRefusedByDefault(t *testing.T) {
	store := memstore.New()
	perClient := newLimiter(t, store, sluice.FixedWindow{Limit: 100, Window: time.Minute}, "per-client", nil)
	perKey := newLimiter(t, store, sluice.FixedWindow{Limit: 2, Window: time.Minute}, "per-key", nil)
	global := newLimiter(t, store, sluice.FixedWindow{Limit: 100, Window: time.Minute}, "global", nil)
	h := newMiddleware(t, Config{Limits: []Limit{
		{Limiter: perClient, Key: ClientAddr(nil)},
		{Limiter: perKey, Key: Header("X-API-Key")},
		{Limiter: global, Key: Constant("all"), Hidden: true},
	}})
	for i := range 5 {
		w := serve(h, "192.0.2.1:1")
		if w.Code != http.StatusBadRequest {
			t.Fatalf("request %d without X-API-Key: %d, want 400 (the per-key limit cannot count it)", i, w.Code)
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("Content-Type %q", ct)
		}
		var p struct {
			Status int    `json:"status"`
			Detail string `json:"detail"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Status != 400 || !strings.Contains(p.Detail, `"per-key"`) {
			t.Errorf("body %s (%v), want a problem naming per-key", w.Body, err)
		}
	}
	// Nothing was counted: the client's and the global budgets are whole.
	for _, l := range []*sluice.Limiter{perClient, global} {
		key := "ip:192.0.2.1"
		if l == global {
			key = "const:all"
		}
		if res, err := l.Peek(t.Context(), key); err != nil || res.Remaining != 100 {
			t.Errorf("%s after refusals for want of a key: %+v, %v; want 100 remaining", l.Name(), res, err)
		}
	}
	for i, want := range []int{200, 200, 429} {
		if w := serve(h, "192.0.2.1:1", "X-API-Key: k"); w.Code != want {
			t.Errorf("keyed request %d: %d, want %d", i, w.Code, want)
		}
	}
	if res, err := perClient.Peek(t.Context(), "ip:192.0.2.1"); err != nil || res.Remaining != 98 {
		t.Errorf("per-client after 2 allowed keyed requests: %+v, %v; want 98 remaining (is the key ClientAddr's?)", res, err)
	}
}

// TestMissingKeyFallBack: FallBack counts a request without the header by
// the fallback's key against the same limiter, so leaving the header off
// gets an address the limit's budget, not an unlimited pass.
func TestMissingKeyFallBack(t *testing.T) {
	store := memstore.New()
	perKey := newLimiter(t, store, sluice.FixedWindow{Limit: 2, Window: time.Minute}, "per-key", nil)
	res := clientip.MustNew(clientip.Config{})
	h := newMiddleware(t, Config{Limits: []Limit{
		{Limiter: perKey, Key: Header("X-API-Key"), Missing: FallBack(ClientAddr(res))},
	}})
	for i, want := range []int{200, 200, 429, 429} {
		if w := serve(h, "192.0.2.1:1"); w.Code != want {
			t.Errorf("request %d without a key: %d, want %d", i, w.Code, want)
		}
	}
	if w := serve(h, "192.0.2.2:1"); w.Code != 200 {
		t.Errorf("another address without a key: %d, want 200", w.Code)
	}
	if w := serve(h, "192.0.2.1:1", "X-API-Key: k"); w.Code != 200 {
		t.Errorf("a key from the exhausted address: %d, want 200 (its own count)", w.Code)
	}
	// A fallback that finds nothing either refuses.
	none := func(*http.Request) string { return "" }
	h = newMiddleware(t, Config{Limits: []Limit{{Limiter: perKey, Key: none, Missing: FallBack(none)}}})
	if w := serve(h, "192.0.2.1:1"); w.Code != http.StatusBadRequest {
		t.Errorf("no key and no fallback key: %d, want 400", w.Code)
	}
}

// TestMissingKeySkipAndErrors: Skip lets the request past the limit, only
// when said; FallBack(nil) is refused by New; a custom ErrorHandler and
// Check get a *NoKeyError.
func TestMissingKeySkipAndErrors(t *testing.T) {
	store := memstore.New()
	l := newLimiter(t, store, sluice.FixedWindow{Limit: 1, Window: time.Minute}, "per-key", nil)
	h := newMiddleware(t, Config{Limits: []Limit{{Limiter: l, Key: Header("X-API-Key"), Missing: Skip()}}})
	for range 3 {
		if w := serve(h, "192.0.2.1:1"); w.Code != 200 || w.Header().Get(HeaderPolicy) != "" {
			t.Fatalf("skipped limit: %d %v", w.Code, w.Header())
		}
	}
	if _, err := New(Config{Limits: []Limit{{Limiter: l, Key: Header("X-API-Key"), Missing: FallBack(nil)}}}); err == nil {
		t.Error("New accepted FallBack(nil)")
	}
	var got error
	m, err := New(Config{Limits: []Limit{{Limiter: l, Key: Header("X-API-Key")}},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) { got = err; w.WriteHeader(401) }})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	m.Handler(http.NotFoundHandler()).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	var nk *NoKeyError
	if w.Code != 401 || !errors.Is(got, ErrNoKey) || !errors.As(got, &nk) || nk.Limit != "per-key" {
		t.Errorf("custom ErrorHandler: code %d, err %v; want 401 and a *NoKeyError for per-key", w.Code, got)
	}
	if st, err := m.Check(httptest.NewRequest("GET", "/", nil)); st != nil || !errors.Is(err, ErrNoKey) {
		t.Errorf("Check without a key: %v, %v; want ErrNoKey", st, err)
	}
}
