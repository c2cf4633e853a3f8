package httplimit

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/httplimit/sfvtest"
	"github.com/sluicehq/sluice/memstore"
)

// TestResetParameterPerAlgorithm: RateLimit's t is the draft's "time until
// additional quota is made available", for every algorithm, and a 429's
// Retry-After is never earlier. Each row is one request at a time after
// the clock's start (1_700_000_000, 20s into a minute).
func TestResetParameterPerAlgorithm(t *testing.T) {
	type row struct {
		at         time.Duration
		code       int
		ratelimit  string // "name r/t", t "-" when left out
		retryAfter string
	}
	for _, tc := range []struct {
		p      sluice.Policy
		policy string
		rows   []row
	}{
		// Everything comes back at the window's end, 40s away.
		{sluice.FixedWindow{Limit: 2, Window: time.Minute}, "p 2/60", []row{
			{0, 200, "p 1/40", ""},
			{time.Second, 200, "p 0/39", ""},
			{1500 * time.Millisecond, 429, "p 0/39", "39"},
		}},
		// 10 tokens, one per second: the next one is a second away, not
		// the ten seconds to a full bucket (the old t).
		{sluice.TokenBucket{Capacity: 10, Rate: 1, Per: time.Second}, "p 10/10", []row{
			{0, 200, "p 9/1", ""},
			{0, 200, "p 8/1", ""},
			{300 * time.Millisecond, 200, "p 7/1", ""}, // 8.3 tokens: the 9th in 0.7s
		}},
		// A refusal: Retry-After 1 with t=1, where t used to be 3.
		{sluice.TokenBucket{Capacity: 3, Rate: 1, Per: time.Second}, "p 3/3", []row{
			{0, 200, "p 2/1", ""},
			{0, 200, "p 1/1", ""},
			{0, 200, "p 0/1", ""},
			{0, 429, "p 0/1", "1"},
		}},
		{sluice.GCRA{Rate: 1, Per: time.Second, Burst: 2}, "p 2/2", []row{
			{0, 200, "p 1/1", ""},
			{0, 200, "p 0/1", ""},
			{100 * time.Millisecond, 429, "p 0/1", "1"},
			{time.Second, 200, "p 0/1", ""},
		}},
		// The log knows its next unit when one entry is logged, or when a
		// request of one unit is refused; otherwise t is left out.
		{sluice.SlidingLog{Limit: 2, Window: 10 * time.Second}, "p 2/10", []row{
			{0, 200, "p 1/10", ""},
			{3 * time.Second, 200, "p 0/-", ""},
			{4 * time.Second, 429, "p 0/6", "6"},
			{10 * time.Second, 200, "p 0/-", ""},
		}},
		{sluice.SlidingWindow{Limit: 2, Window: 10 * time.Second}, "p 2/10", []row{
			{0, 200, "p 1/-", ""},
			{time.Second, 200, "p 0/-", ""},
			// Refused 9s before the window's end at 20s, with nothing
			// before: the estimate is 2 until then, and 2×(1-e/10s) < 1
			// after 5s more.
			{time.Second, 429, "p 0/14", "14"},
		}},
	} {
		t.Run(fmt.Sprintf("%T", tc.p), func(t *testing.T) {
			c := newClock()
			l := newLimiter(t, memstore.New(), tc.p, "p", c, sluice.WithDenyCache(false))
			h := newMiddleware(t, Config{Limits: []Limit{{Limiter: l, Key: Constant("k")}}})
			var at time.Duration
			for i, r := range tc.rows {
				c.Advance(r.at - at)
				at = r.at
				w := serve(h, "192.0.2.1:1")
				pol, rl := summary(t, w)
				if w.Code != r.code || strings.Join(pol, ",") != tc.policy || strings.Join(rl, ",") != r.ratelimit || w.Header().Get("Retry-After") != r.retryAfter {
					t.Errorf("row %d at %v: %d %v %v Retry-After %q; want %d %s %s %q", i, r.at, w.Code, pol, rl,
						w.Header().Get("Retry-After"), r.code, tc.policy, r.ratelimit, r.retryAfter)
				}
			}
		})
	}
}

// Two limits with one name would give one response two items of that name:
// New refuses them, whether the name is given or the limiter's.
func TestSameNameRefused(t *testing.T) {
	store := memstore.New()
	a := newLimiter(t, store, sluice.FixedWindow{Limit: 1, Window: time.Minute}, "api", nil)
	b := newLimiter(t, store, sluice.GCRA{Rate: 1, Per: time.Second, Burst: 1}, "other", nil)
	for _, limits := range [][]Limit{
		{{Limiter: a, Key: Constant("x")}, {Limiter: a, Key: ClientAddr(nil)}},
		{{Limiter: a, Key: Constant("x")}, {Limiter: b, Key: Constant("x"), Name: "api"}},
		{{Limiter: a, Key: Constant("x"), Name: "n"}, {Limiter: b, Key: Constant("x"), Name: "n", Hidden: true}},
	} {
		if _, err := New(Config{Limits: limits}); err == nil || !strings.Contains(err.Error(), "both named") {
			t.Errorf("New with two limits of one name: %v", err)
		}
	}
	if _, err := New(Config{Limits: []Limit{{Limiter: a, Key: Constant("x")}, {Limiter: a, Key: ClientAddr(nil), Name: "api-per-client"}}}); err != nil {
		t.Errorf("one limiter under two names: %v", err)
	}
}

// On a 429, the limits that allowed report what they have once their units
// are back: r is what it was before the request, and t agrees with it.
func TestRefundShownOn429(t *testing.T) {
	c := newClock()
	store := memstore.New()
	wide := newLimiter(t, store, sluice.TokenBucket{Capacity: 5, Rate: 1, Per: time.Second}, "wide", c)
	narrow := newLimiter(t, store, sluice.FixedWindow{Limit: 1, Window: time.Minute}, "narrow", c)
	h := newMiddleware(t, Config{Limits: []Limit{{Limiter: wide, Key: Constant("k")}, {Limiter: narrow, Key: Constant("k")}}})
	w := serve(h, "192.0.2.1:1")
	if _, rl := summary(t, w); w.Code != 200 || strings.Join(rl, ",") != "wide 4/1,narrow 0/40" {
		t.Fatalf("first: %d %v", w.Code, rl)
	}
	c.Advance(200 * time.Millisecond)
	w = serve(h, "192.0.2.1:1")
	// wide took a unit (3.2 tokens) and gave it back: 4.2 tokens, the 5th
	// in 0.8s.
	if _, rl := summary(t, w); w.Code != 429 || strings.Join(rl, ",") != "wide 4/1,narrow 0/40" || w.Header().Get("Retry-After") != "40" {
		t.Fatalf("refused: %d %v %v", w.Code, rl, w.Header())
	}
	if res, _ := wide.Peek(t.Context(), "const:k"); res.Remaining != 4 {
		t.Fatalf("wide after the refund: %+v", res)
	}
}

// With ResetEpoch, X-RateLimit-Reset is the moment of full restoration
// rounded up once: 100ms after ...000.25 is ...001, not ...002.
func TestResetEpochRoundsOnce(t *testing.T) {
	c := newClock()
	c.Advance(250 * time.Millisecond)
	l := newLimiter(t, memstore.New(), sluice.TokenBucket{Capacity: 10, Rate: 10, Per: time.Second}, "tb", c)
	h := newMiddleware(t, Config{Limits: []Limit{{Limiter: l, Key: Constant("k")}}, ResetEpoch: true, Now: c.Now})
	if got := serve(h, "192.0.2.1:1").Header().Get(HeaderXReset); got != "1700000001" {
		t.Errorf("X-RateLimit-Reset = %s, want 1700000001", got)
	}
	c.Advance(750 * time.Millisecond) // at a whole second: full at ...001.1
	if got := serve(h, "192.0.2.1:1").Header().Get(HeaderXReset); got != "1700000002" {
		t.Errorf("X-RateLimit-Reset = %s, want 1700000002", got)
	}
	// A moment exactly on a second is not rounded further.
	if got := ceilUnix(time.Unix(1_700_000_005, 0)); got != 1_700_000_005 {
		t.Errorf("ceilUnix of a whole second = %d", got)
	}
}

// TestHeadersOnRandomTraffic drives random costs through a middleware with
// three limits of random algorithms and checks every response with
// sfvtest.CheckHeaders and against the limiters themselves: on a 429, each
// refusing limit's t is at most Retry-After, which is the longest
// RetryAfter in whole seconds; each allowing limit's r is what a peek says
// once its units are back.
func TestHeadersOnRandomTraffic(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 13))
	policies := []sluice.Policy{
		sluice.FixedWindow{Limit: 4, Window: 3 * time.Second},
		sluice.SlidingLog{Limit: 3, Window: 2 * time.Second},
		sluice.SlidingWindow{Limit: 5, Window: 2 * time.Second},
		sluice.TokenBucket{Capacity: 4, Rate: 3, Per: time.Second},
		sluice.GCRA{Rate: 2, Per: time.Second, Burst: 3},
	}
	refusals := 0
	for trial := range 20 {
		c := newClock()
		store := memstore.New()
		var limits []Limit
		var limiters []*sluice.Limiter
		for i := range 3 {
			p := policies[r.IntN(len(policies))]
			l := newLimiter(t, store, p, "l"+strconv.Itoa(i), c, sluice.WithDenyCache(false))
			limiters = append(limiters, l)
			limits = append(limits, Limit{Limiter: l, Key: Constant("k"), Cost: func(req *http.Request) int64 {
				n, _ := strconv.ParseInt(req.Header.Get("X-Cost"), 10, 64)
				return min(n, l.Rule().Limit)
			}})
		}
		m, err := New(Config{Limits: limits})
		if err != nil {
			t.Fatal(err)
		}
		var st *Status
		h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { st, _ = FromContext(req.Context()) }))
		m.cfg.DenyHandler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			st, _ = FromContext(req.Context())
			w.WriteHeader(http.StatusTooManyRequests)
		})
		for step := range 40 {
			c.Advance(time.Duration(r.IntN(400_000)) * time.Microsecond)
			w := serve(h, "192.0.2.1:1", "X-Cost: "+strconv.Itoa(r.IntN(3)))
			got, err := sfvtest.CheckHeaders(w.Header())
			if err != nil {
				t.Fatalf("trial %d step %d: %v", trial, step, err)
			}
			if w.Code == 200 {
				continue
			}
			refusals++
			if want := RetryAfterSeconds(st.RetryAfter()); got.RetryAfter != want {
				t.Fatalf("trial %d step %d: Retry-After %d, want %d", trial, step, got.RetryAfter, want)
			}
			for i, ls := range st.Limits {
				item, ok := got.Limit(ls.Name)
				if !ok {
					t.Fatalf("trial %d step %d: no RateLimit item for %s", trial, step, ls.Name)
				}
				if !ls.Result.Allowed {
					if item.HasT && item.T > got.RetryAfter {
						t.Fatalf("trial %d step %d: %s refused with t=%d after Retry-After %d", trial, step, ls.Name, item.T, got.RetryAfter)
					}
					continue
				}
				peek, err := limiters[i].Peek(t.Context(), "const:k")
				if err != nil {
					t.Fatal(err)
				}
				if item.R != peek.Remaining {
					t.Fatalf("trial %d step %d: %s allowed with r=%d, a peek after the refund says %d", trial, step, ls.Name, item.R, peek.Remaining)
				}
			}
		}
	}
	if refusals < 50 {
		t.Fatalf("only %d refusals: the test does not test", refusals)
	}
}

// TestHeadersOfOverride: a key under an override with its own window and
// limit advertises the override's quota and window, not the policy's.
func TestHeadersOfOverride(t *testing.T) {
	c := newClock()
	store := memstore.New(memstore.WithClock(c.Now))
	l := newLimiter(t, store, sluice.FixedWindow{Limit: 100, Window: time.Hour}, "api", c, sluice.WithOverrides(true))
	if err := l.SetOverride(context.Background(), "const:all", sluice.Override{Limit: 50, Window: 10 * time.Minute, Expires: c.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	h := newMiddleware(t, Config{Limits: []Limit{{Limiter: l, Key: Constant("all")}}})
	w := serve(h, "192.0.2.1:1")
	if got := w.Header().Get(HeaderPolicy); got != `"api";q=50;w=600` {
		t.Errorf("RateLimit-Policy %q, want the override's q=50;w=600", got)
	}
	if got := w.Header().Get(HeaderXLimit); got != "50" {
		t.Errorf("X-RateLimit-Limit %q, want 50", got)
	}
}

// TestProblemDetailSingular: a refusal with one second to wait says "1
// second", not "1 seconds".
func TestProblemDetailSingular(t *testing.T) {
	for _, tc := range []struct {
		wait time.Duration
		want string
	}{
		{time.Second, "Too many requests: retry after 1 second."},
		{300 * time.Millisecond, "Too many requests: retry after 1 second."},
		{2 * time.Second, "Too many requests: retry after 2 seconds."},
	} {
		st := &Status{Limits: []LimitStatus{{Name: "api", Rule: sluice.Rule{Algorithm: driver.AlgorithmFixedWindow, Limit: 1, Window: time.Minute},
			Cost: 1, Result: sluice.Result{Limit: 1, RetryAfter: tc.wait, ResetAfter: tc.wait}}}}
		w := httptest.NewRecorder()
		WriteProblem(w, st)
		var p Problem
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Detail != tc.want {
			t.Errorf("wait %v: detail %q (%v), want %q", tc.wait, p.Detail, err, tc.want)
		}
	}
}
