package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
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
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// clock is a fake clock for limiters.
// clock is sluicetest's fake clock.
type clock = sluicetest.Clock

func newClock() *clock { return sluicetest.NewClockAt(time.Unix(1_700_000_000, 0)) }

func newLimiter(t testing.TB, store driver.Store, p sluice.Policy, name string, c *clock, opts ...sluice.Option) *sluice.Limiter {
	t.Helper()
	opts = append([]sluice.Option{sluice.WithName(name), sluice.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	if c != nil {
		opts = append(opts, sluice.WithClock(c.Now))
	}
	l, err := sluice.New(store, p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func newMiddleware(t testing.TB, cfg Config) http.Handler {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
}

// serve sends a GET from peer with header lines "Name: value".
func serve(h http.Handler, peer string, headers ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = peer
	for _, hv := range headers {
		k, v, _ := strings.Cut(hv, ": ")
		r.Header.Add(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// summary checks every rate-limit header of w with sfvtest.CheckHeaders
// and renders the draft headers' items as "name q/w" and "name r/t" ("name
// r/-" without t).
func summary(t *testing.T, w *httptest.ResponseRecorder) (policy, ratelimit []string) {
	t.Helper()
	h, err := sfvtest.CheckHeaders(w.Header())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range h.Policies {
		policy = append(policy, p.Name+" "+strconv.FormatInt(p.Q, 10)+"/"+strconv.FormatInt(p.W, 10))
	}
	for _, l := range h.Limits {
		tv := "-"
		if l.HasT {
			tv = strconv.FormatInt(l.T, 10)
		}
		ratelimit = append(ratelimit, l.Name+" "+strconv.FormatInt(l.R, 10)+"/"+tv)
	}
	return policy, ratelimit
}

func problem(t *testing.T, w *httptest.ResponseRecorder) Problem {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q", ct)
	}
	var p Problem
	dec := json.NewDecoder(w.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatal(err)
	}
	if p.Type != ProblemType || p.Status != 429 || p.Title == "" {
		t.Fatalf("problem = %+v", p)
	}
	return p
}

func TestRefusal(t *testing.T) {
	c := newClock()
	store := memstore.New()
	api := newLimiter(t, store, sluice.FixedWindow{Limit: 3, Window: time.Minute}, "api", c)
	h := newMiddleware(t, Config{Limits: []Limit{{Limiter: api, Key: ClientAddr(nil)}}})

	// Fixed windows are aligned to the epoch: 1_700_000_000 is 20s into a
	// minute, so the window resets in 40s.
	for i, want := range []int64{2, 1, 0} {
		w := serve(h, "192.0.2.1:1000")
		if w.Code != 200 || w.Body.String() != "ok" {
			t.Fatalf("request %d: %d %q", i, w.Code, w.Body)
		}
		if got := w.Header().Get("X-RateLimit-Remaining"); got != strconv.FormatInt(want, 10) {
			t.Fatalf("request %d: X-RateLimit-Remaining = %q, want %d", i, got, want)
		}
		if w.Header().Get("X-RateLimit-Limit") != "3" || w.Header().Get("X-RateLimit-Reset") != "40" {
			t.Fatalf("request %d: headers %v", i, w.Header())
		}
		if w.Header().Get("Retry-After") != "" {
			t.Fatalf("request %d: Retry-After on an allowed response", i)
		}
		pol, rl := summary(t, w)
		if strings.Join(pol, ",") != "api 3/60" || strings.Join(rl, ",") != "api "+strconv.FormatInt(want, 10)+"/40" {
			t.Fatalf("request %d: draft headers %v %v", i, pol, rl)
		}
	}
	c.Advance(500 * time.Millisecond)
	w := serve(h, "192.0.2.1:1001")
	if w.Code != 429 {
		t.Fatalf("4th request: %d", w.Code)
	}
	// 39.5s to the window's end: rounded up.
	if got := w.Header().Get("Retry-After"); got != "40" {
		t.Errorf("Retry-After = %q, want 40", got)
	}
	if p := problem(t, w); len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "api" {
		t.Errorf("violated-policies = %q", p.ViolatedPolicies)
	}
	if _, rl := summary(t, w); strings.Join(rl, ",") != "api 0/40" {
		t.Errorf("RateLimit = %v", rl)
	}
	// Another client is not affected.
	if w := serve(h, "192.0.2.2:1000"); w.Code != 200 {
		t.Errorf("other client: %d", w.Code)
	}
	// Waiting the advertised time is enough.
	c.Advance(39500 * time.Millisecond)
	if w := serve(h, "192.0.2.1:1000"); w.Code != 200 {
		t.Errorf("after Retry-After: %d", w.Code)
	}
}

func TestSeveralLimits(t *testing.T) {
	c := newClock()
	store := memstore.New()
	perIP := newLimiter(t, store, sluice.SlidingLog{Limit: 2, Window: 10 * time.Second}, "per-ip", c)
	global := newLimiter(t, store, sluice.GCRA{Rate: 1, Per: time.Second, Burst: 3}, "global", c)
	h := newMiddleware(t, Config{Limits: []Limit{
		{Limiter: perIP, Key: ClientAddr(nil)},
		{Limiter: global, Key: Constant("all")},
	}})

	w := serve(h, "192.0.2.1:1")
	pol, rl := summary(t, w)
	if strings.Join(pol, ",") != "per-ip 2/10,global 3/3" {
		t.Fatalf("RateLimit-Policy = %v", pol)
	}
	if strings.Join(rl, ",") != "per-ip 1/10,global 2/1" {
		t.Fatalf("RateLimit = %v", rl)
	}
	// The most restrictive limit is the per-ip one (1 left).
	if w.Header().Get("X-RateLimit-Limit") != "2" || w.Header().Get("X-RateLimit-Remaining") != "1" {
		t.Fatalf("X-RateLimit: %v", w.Header())
	}
	serve(h, "192.0.2.2:1")
	serve(h, "192.0.2.3:1") // global exhausted now
	w = serve(h, "192.0.2.4:1")
	if w.Code != 429 {
		t.Fatalf("global exhausted: %d", w.Code)
	}
	if p := problem(t, w); strings.Join(p.ViolatedPolicies, ",") != "global" {
		t.Fatalf("violated-policies = %v", p.ViolatedPolicies)
	}
	if w.Header().Get("Retry-After") != "1" || w.Header().Get("X-RateLimit-Limit") != "3" {
		t.Fatalf("headers %v", w.Header())
	}
	// The per-ip unit of the refused request was given back: 192.0.2.4
	// still has its two requests once the global limit allows.
	c.Advance(2 * time.Second)
	for i := range 2 {
		if w := serve(h, "192.0.2.4:1"); w.Code != 200 {
			t.Fatalf("192.0.2.4 request %d after refund: %d", i, w.Code)
		}
	}
	if w := serve(h, "192.0.2.4:1"); w.Code != 429 {
		t.Fatalf("192.0.2.4 third request: %d", w.Code)
	}
}

func TestKeyFuncs(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "[2001:db8:1:2::9]:4"
	r.Header.Set("X-API-Key", "secret-key")
	type ctxKey struct{}
	r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, "user:42"))

	if got := ClientAddr(nil)(r); got != "ip:2001\\:db8\\:1\\:2\\:\\:/64" {
		t.Errorf("ClientAddr = %q", got)
	}
	hk := Header("x-api-key")(r)
	if !strings.HasPrefix(hk, "header:x-api-key:") || strings.Contains(hk, "secret") || len(hk) != len("header:x-api-key:")+64 {
		t.Errorf("Header = %q", hk)
	}
	if other := Header("X-Api-Key")(r); other != hk {
		t.Errorf("header name case changes the key: %q vs %q", other, hk)
	}
	if got := Header("Authorization")(r); got != "" {
		t.Errorf("missing header gives %q", got)
	}
	if got := Principal(ctxKey{})(r); got != "principal:user\\:42" {
		t.Errorf("Principal = %q", got)
	}
	if got := Principal("other")(r); got != "" {
		t.Errorf("missing principal gives %q", got)
	}
	if got := Constant("all")(r); got != "const:all" {
		t.Errorf("Constant = %q", got)
	}
}

// A limit whose Missing is Skip does not apply to a request its key
// function finds no key for: authenticated requests skip the anonymous
// limit and vice versa.
func TestLimitNotApplying(t *testing.T) {
	store := memstore.New()
	anon := newLimiter(t, store, sluice.FixedWindow{Limit: 1, Window: time.Minute}, "anon", nil)
	keyed := newLimiter(t, store, sluice.FixedWindow{Limit: 5, Window: time.Minute}, "keyed", nil)
	anonOnly := func(r *http.Request) string {
		if r.Header.Get("X-API-Key") != "" {
			return ""
		}
		return ClientAddr(nil)(r)
	}
	h := newMiddleware(t, Config{Limits: []Limit{
		{Limiter: anon, Key: anonOnly, Missing: Skip()},
		{Limiter: keyed, Key: Header("X-API-Key"), Missing: Skip()},
	}})
	for i := range 3 {
		w := serve(h, "192.0.2.1:1", "X-API-Key: k")
		if w.Code != 200 {
			t.Fatalf("keyed request %d: %d", i, w.Code)
		}
		if _, rl := summary(t, w); len(rl) != 1 || !strings.HasPrefix(rl[0], "keyed ") {
			t.Fatalf("keyed request %d: RateLimit = %v", i, rl)
		}
	}
	if w := serve(h, "192.0.2.1:1"); w.Code != 200 {
		t.Fatalf("anonymous: %d", w.Code)
	}
	if w := serve(h, "192.0.2.1:1"); w.Code != 429 {
		t.Fatalf("anonymous second: %d", w.Code)
	}
	// No limit applies at all: no headers, no counting.
	none := newMiddleware(t, Config{Limits: []Limit{{Limiter: keyed, Key: Header("X-Other"), Missing: Skip()}}})
	w := serve(none, "192.0.2.1:1")
	if w.Code != 200 || w.Header().Get("X-RateLimit-Limit") != "" || w.Header().Get(HeaderPolicy) != "" {
		t.Fatalf("no limit applies: %d %v", w.Code, w.Header())
	}
}

func TestExemptAndDenyHandler(t *testing.T) {
	store := memstore.New()
	l := newLimiter(t, store, sluice.FixedWindow{Limit: 1, Window: time.Minute}, "api", nil)
	var denied *Status
	h := newMiddleware(t, Config{
		Limits: []Limit{{Limiter: l, Key: ClientAddr(nil), Name: `my "api"`}},
		Exempt: func(r *http.Request) bool { return r.Header.Get("X-Health") == "1" },
		DenyHandler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			denied, _ = FromContext(r.Context())
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "slow down")
		}),
	})
	for range 5 {
		if w := serve(h, "192.0.2.1:1", "X-Health: 1"); w.Code != 200 || w.Header().Get("X-RateLimit-Limit") != "" {
			t.Fatalf("exempt: %d %v", w.Code, w.Header())
		}
	}
	if w := serve(h, "192.0.2.1:1"); w.Code != 200 {
		t.Fatalf("first counted request: %d", w.Code)
	}
	w := serve(h, "192.0.2.1:1")
	if w.Code != 503 || w.Body.String() != "slow down" {
		t.Fatalf("custom deny: %d %q", w.Code, w.Body)
	}
	if w.Header().Get("Retry-After") == "" {
		t.Fatal("Retry-After not set before the deny handler")
	}
	if denied == nil || denied.Allowed || strings.Join(denied.Violated(), ",") != `my "api"` {
		t.Fatalf("deny handler status %+v", denied)
	}
	pol, _ := summary(t, w)
	if len(pol) != 1 || pol[0] != `my "api" 1/60` {
		t.Fatalf("escaped policy name: %v (raw %q)", pol, w.Header().Get(HeaderPolicy))
	}
}

func TestHeaderSwitches(t *testing.T) {
	c := newClock()
	c.Advance(250 * time.Millisecond)
	store := memstore.New()
	l := newLimiter(t, store, sluice.TokenBucket{Capacity: 10, Rate: 1, Per: time.Second}, "tb", c)

	w := serve(newMiddleware(t, Config{Limits: []Limit{{Limiter: l, Key: Constant("a")}}, OmitXRateLimit: true}), "192.0.2.1:1")
	if w.Header().Get("X-RateLimit-Limit") != "" || w.Header().Get(HeaderRateLimit) == "" {
		t.Fatalf("OmitXRateLimit: %v", w.Header())
	}
	w = serve(newMiddleware(t, Config{Limits: []Limit{{Limiter: l, Key: Constant("b")}}, OmitRateLimit: true}), "192.0.2.1:1")
	if w.Header().Get("X-RateLimit-Limit") != "10" || w.Header().Get(HeaderRateLimit) != "" || w.Header().Get(HeaderPolicy) != "" {
		t.Fatalf("OmitRateLimit: %v", w.Header())
	}
	// One token taken: full again in 1s. Epoch: now + 1s, rounded up.
	w = serve(newMiddleware(t, Config{Limits: []Limit{{Limiter: l, Key: Constant("c")}}, ResetEpoch: true, Now: c.Now}), "192.0.2.1:1")
	if got, want := w.Header().Get("X-RateLimit-Reset"), strconv.FormatInt(1_700_000_002, 10); got != want {
		t.Fatalf("epoch reset = %q, want %q", got, want)
	}
	pol, rl := summary(t, w)
	if strings.Join(pol, ",") != "tb 10/10" || strings.Join(rl, ",") != "tb 9/1" {
		t.Fatalf("token bucket draft headers %v %v", pol, rl)
	}
	w = serve(newMiddleware(t, Config{Limits: []Limit{{Limiter: l, Key: Constant("d"), Hidden: true}}}), "192.0.2.1:1")
	if len(w.Header()) > 1 { // Content-Type only
		t.Fatalf("hidden limit advertised: %v", w.Header())
	}
}

// failing is a store that is always unavailable.
type failing struct{}

func (failing) Do(ctx context.Context, batch []driver.Op) error {
	for i := range batch {
		batch[i].Err = errors.New("connection refused")
	}
	return nil
}

func (failing) Delete(context.Context, ...string) error { return errors.New("connection refused") }

func TestDegradedAndShadow(t *testing.T) {
	store := memstore.New()
	healthy := newLimiter(t, store, sluice.FixedWindow{Limit: 5, Window: time.Minute}, "healthy", nil)
	open := newLimiter(t, failing{}, sluice.FixedWindow{Limit: 5, Window: time.Minute}, "open", nil)
	closed := newLimiter(t, failing{}, sluice.FixedWindow{Limit: 5, Window: time.Minute}, "closed", nil, sluice.WithFailMode(sluice.FailClosed))
	shadow := newLimiter(t, store, sluice.FixedWindow{Limit: 1, Window: time.Minute}, "shadow", nil, sluice.WithShadow(true))

	// Fail open: the request goes through; the degraded limit is in
	// RateLimit-Policy but has no RateLimit item, the healthy one has.
	h := newMiddleware(t, Config{Limits: []Limit{{Limiter: open, Key: Constant("x")}, {Limiter: healthy, Key: Constant("x")}}})
	w := serve(h, "192.0.2.1:1")
	pol, rl := summary(t, w)
	if w.Code != 200 || strings.Join(pol, ",") != "open 5/60,healthy 5/60" || len(rl) != 1 || !strings.HasPrefix(rl[0], "healthy 4/") {
		t.Fatalf("fail open: %d %v %v", w.Code, pol, rl)
	}
	if w.Header().Get("X-RateLimit-Remaining") != "4" {
		t.Fatalf("fail open: X-RateLimit from the degraded limit: %v", w.Header())
	}
	// Degraded alone: a plain 200 without rate-limit values.
	w = serve(newMiddleware(t, Config{Limits: []Limit{{Limiter: open, Key: Constant("x")}}}), "192.0.2.1:1")
	if w.Code != 200 || w.Body.String() != "ok" || w.Header().Get("X-RateLimit-Remaining") != "" || w.Header().Get(HeaderRateLimit) != "" {
		t.Fatalf("degraded alone: %d %v", w.Code, w.Header())
	}
	// Fail closed: refused, Retry-After 1, and the healthy limit's unit is
	// given back.
	h = newMiddleware(t, Config{Limits: []Limit{{Limiter: healthy, Key: Constant("y")}, {Limiter: closed, Key: Constant("y")}}})
	w = serve(h, "192.0.2.1:1")
	if w.Code != 429 || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("fail closed: %d %v", w.Code, w.Header())
	}
	if p := problem(t, w); strings.Join(p.ViolatedPolicies, ",") != "closed" {
		t.Fatalf("fail closed violated-policies %v", p.ViolatedPolicies)
	}
	if res, _ := healthy.Peek(context.Background(), "const:y"); res.Remaining != 5 {
		t.Fatalf("healthy limit not refunded: %+v", res)
	}
	// Shadow: never refuses, and is never shown, neither before nor
	// after it would refuse: a dark-launched limit stays invisible.
	h = newMiddleware(t, Config{Limits: []Limit{{Limiter: shadow, Key: Constant("z")}, {Limiter: healthy, Key: Constant("z")}}})
	for i := range 3 {
		w := serve(h, "192.0.2.1:1")
		pol, rl := summary(t, w)
		if w.Code != 200 || strings.Join(pol, ",") != "healthy 5/60" || len(rl) != 1 || !strings.HasPrefix(rl[0], "healthy ") ||
			w.Header().Get(HeaderXLimit) != "5" {
			t.Fatalf("shadow request %d: %d %v %v %v", i, w.Code, pol, rl, w.Header())
		}
	}
	w = serve(newMiddleware(t, Config{Limits: []Limit{{Limiter: shadow, Key: Constant("z2")}}}), "192.0.2.1:1")
	if w.Code != 200 || len(w.Header()) > 1 { // Content-Type only
		t.Fatalf("shadow limit alone: %d %v", w.Code, w.Header())
	}
}

func TestErrors(t *testing.T) {
	store := memstore.New()
	l := newLimiter(t, store, sluice.FixedWindow{Limit: 2, Window: time.Minute}, "api", nil)
	var got error
	h := newMiddleware(t, Config{
		Limits:       []Limit{{Limiter: l, Key: Constant("a"), Cost: func(*http.Request) int64 { return 3 }}},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) { got = err; w.WriteHeader(418) },
	})
	if w := serve(h, "192.0.2.1:1"); w.Code != 418 || !errors.Is(got, sluice.ErrInvalidCost) {
		t.Fatalf("cost above limit: %d %v", w.Code, got)
	}
	// Default error handler.
	h = newMiddleware(t, Config{Limits: []Limit{{Limiter: l, Key: Constant("a"), Cost: func(*http.Request) int64 { return -1 }}}, Logger: slog.New(slog.DiscardHandler)})
	if w := serve(h, "192.0.2.1:1"); w.Code != 500 {
		t.Fatalf("negative cost: %d", w.Code)
	}
	for _, cfg := range []Config{
		{},
		{Limits: []Limit{{Limiter: l}}},
		{Limits: []Limit{{Key: Constant("a")}}},
		{Limits: []Limit{{Limiter: l, Key: Constant("a"), Name: "tab\there"}}},
		{Limits: []Limit{{Limiter: l, Key: Constant("a"), Name: strings.Repeat("x", 65)}}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

func TestCost(t *testing.T) {
	store := memstore.New()
	l := newLimiter(t, store, sluice.FixedWindow{Limit: 10, Window: time.Minute}, "api", nil)
	h := newMiddleware(t, Config{Limits: []Limit{{Limiter: l, Key: Constant("a"), Cost: func(r *http.Request) int64 {
		n, _ := strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64)
		return n
	}}}})
	for _, tc := range []struct {
		cost      string
		code      int
		remaining string
	}{{"4", 200, "6"}, {"0", 200, "6"}, {"6", 200, "0"}, {"0", 429, "0"}, {"1", 429, "0"}} {
		w := serve(h, "192.0.2.1:1", "X-Cost: "+tc.cost)
		if w.Code != tc.code || w.Header().Get("X-RateLimit-Remaining") != tc.remaining {
			t.Fatalf("cost %s: %d remaining %s; want %d %s", tc.cost, w.Code, w.Header().Get("X-RateLimit-Remaining"), tc.code, tc.remaining)
		}
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 1}, {-time.Second, 1}, {time.Nanosecond, 1}, {time.Second, 1},
		{time.Second + time.Microsecond, 2}, {1500 * time.Millisecond, 2}, {time.Hour, 3600},
	} {
		if got := RetryAfterSeconds(tc.d); got != tc.want {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

// A spoofed X-Forwarded-For from an untrusted peer does not change the key:
// rotating the header does not buy a fresh budget. From a trusted proxy the
// forwarded address is the key.
func TestSpoofedForwardedFor(t *testing.T) {
	store := memstore.New()
	l := newLimiter(t, store, sluice.FixedWindow{Limit: 2, Window: time.Minute}, "api", nil)
	trusted, _ := clientip.ParsePrefixes("10.0.0.0/8")
	res := clientip.MustNew(clientip.Config{TrustedProxies: trusted})
	h := newMiddleware(t, Config{Limits: []Limit{{Limiter: l, Key: ClientAddr(res)}}})

	codes := ""
	for i := range 4 {
		w := serve(h, "198.51.100.7:1", "X-Forwarded-For: 203.0.113."+strconv.Itoa(i))
		codes += strconv.Itoa(w.Code) + " "
	}
	if codes != "200 200 429 429 " {
		t.Fatalf("spoofing untrusted peer: %s", codes)
	}
	codes = ""
	for i := range 4 {
		w := serve(h, "10.0.0.1:1", "X-Forwarded-For: 198.51.100.7, 203.0.113."+strconv.Itoa(i))
		codes += strconv.Itoa(w.Code) + " "
	}
	if codes != "200 200 200 200 " {
		t.Fatalf("distinct clients behind a trusted proxy: %s", codes)
	}
}

func BenchmarkMiddleware(b *testing.B) {
	store := memstore.New()
	l := newLimiter(b, store, sluice.GCRA{Rate: 1e6, Per: time.Second, Burst: 1000}, "api", nil)
	h := newMiddleware(b, Config{Limits: []Limit{{Limiter: l, Key: ClientAddr(nil)}}})
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1"
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 200 {
			b.Fatal(w.Code)
		}
	}
}
