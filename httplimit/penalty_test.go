package httplimit

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// TestBlockedHeaders: a request refused because its key is blocked names
// the limit in X-RateLimit-Blocked, and Retry-After and RateLimit's t are
// the block's end; an ordinary refusal carries no X-RateLimit-Blocked.
func TestBlockedHeaders(t *testing.T) {
	c := newClock()
	api := newLimiter(t, memstore.New(), sluice.FixedWindow{Limit: 1, Window: time.Hour}, "api", c,
		sluice.WithPenalty(sluice.Penalty{After: 2, Within: time.Minute, Block: 90 * time.Second}))
	h := newMiddleware(t, Config{Limits: []Limit{{Limiter: api, Key: ClientAddr(nil)}}})
	for i, want := range []struct {
		code                         int
		blocked, retry, rateLimitVal string
	}{
		{200, "", "", ""},
		{429, "", "", ""},                      // the window's own refusal (checked below)
		{429, `"api"`, "90", `"api";r=0;t=90`}, // the second refusal starts the block
		{429, `"api"`, "90", `"api";r=0;t=90`},
	} {
		rec := serve(h, "192.0.2.1:1")
		got := rec.Header()
		if want.retry == "" {
			want.retry, want.rateLimitVal = got.Get(HeaderRetryAfter), got.Get(HeaderRateLimit)
			if i == 1 && (want.retry == "" || want.retry == "90") {
				t.Fatalf("request 2: Retry-After %q, want the window's end", want.retry)
			}
		}
		if rec.Code != want.code || got.Get(HeaderBlocked) != want.blocked || got.Get(HeaderRetryAfter) != want.retry || got.Get(HeaderRateLimit) != want.rateLimitVal {
			t.Fatalf("request %d: %d %v, want %+v", i+1, rec.Code, got, want)
		}
	}
}

// TestNextUnitBlocked: for a blocked key the next unit comes at the
// block's end, whatever the cost and the algorithm.
func TestNextUnitBlocked(t *testing.T) {
	r, err := sluice.TokenBucket{Capacity: 5, Rate: 1, Per: time.Second}.Rule()
	if err != nil {
		t.Fatal(err)
	}
	res := sluice.Result{Limit: 5, Blocked: true, RetryAfter: 90 * time.Second, ResetAfter: 90 * time.Second}
	if d, ok := NextUnit(r, res, 3); d != 90*time.Second || !ok {
		t.Fatalf("NextUnit = %v, %v; want the block's end, 1m30s", d, ok)
	}
}
