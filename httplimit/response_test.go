package httplimit

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// TestDenyResponse: a refusing limit's DenyStatus and DenyBody answer; the
// one refused longest wins among several; problem+json keeps the limit's
// status in its "status" member; the default stays 429.
func TestDenyResponse(t *testing.T) {
	c := newClock()
	store := memstore.New()
	capacity := newLimiter(t, store, sluice.FixedWindow{Limit: 1, Window: time.Hour}, "capacity", c)
	fair := newLimiter(t, store, sluice.FixedWindow{Limit: 1, Window: time.Minute}, "fair", c)
	plain := newLimiter(t, store, sluice.FixedWindow{Limit: 1, Window: time.Minute}, "plain", c)
	body := json.RawMessage(`{"error":"busy","retry":true}`)
	h := newMiddleware(t, Config{Limits: []Limit{
		{Limiter: capacity, Key: Constant("all"), DenyStatus: 503, DenyBody: body},
		{Limiter: fair, Key: ClientAddr(nil), DenyStatus: 420},
	}})
	if w := serve(h, "192.0.2.1:1"); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	// Both refuse; capacity waits an hour, fair a minute: capacity answers.
	w := serve(h, "192.0.2.1:1")
	if w.Code != 503 || w.Body.String() != string(body) || w.Header().Get("Content-Type") != "application/json" || w.Header().Get("Retry-After") == "" {
		t.Fatalf("both refuse: %d %q %v", w.Code, w.Body, w.Header())
	}
	// Only fair refuses (another limiter pair): its status, in problem+json.
	h2 := newMiddleware(t, Config{Limits: []Limit{{Limiter: fair, Key: ClientAddr(nil), DenyStatus: 420}}})
	w = serve(h2, "192.0.2.1:1")
	if w.Code != 420 || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("fair: %d %v", w.Code, w.Header())
	}
	var p Problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Status != 420 || strings.Join(p.ViolatedPolicies, ",") != "fair" {
		t.Fatalf("fair problem: %+v %v", p, err)
	}
	// The default: 429.
	h3 := newMiddleware(t, Config{Limits: []Limit{{Limiter: plain, Key: ClientAddr(nil)}}})
	serve(h3, "192.0.2.1:1")
	if w := serve(h3, "192.0.2.1:1"); w.Code != 429 {
		t.Fatalf("default: %d", w.Code)
	}
}

// TestDenyResponseRefused: New refuses a status that is not an error and
// a body that is not JSON, naming the field.
func TestDenyResponseRefused(t *testing.T) {
	l := newLimiter(t, memstore.New(), sluice.FixedWindow{Limit: 1, Window: time.Minute}, "x", nil)
	for _, tc := range []struct {
		lim  Limit
		want string
	}{
		{Limit{Limiter: l, Key: Constant("a"), DenyStatus: 200}, "DenyStatus"},
		{Limit{Limiter: l, Key: Constant("a"), DenyStatus: 600}, "DenyStatus"},
		{Limit{Limiter: l, Key: Constant("a"), DenyBody: json.RawMessage(`{"a":`)}, "DenyBody"},
	} {
		if _, err := New(Config{Limits: []Limit{tc.lim}}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.lim, err, tc.want)
		}
	}
}
