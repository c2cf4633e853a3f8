package httplimit

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// TestWarningHeader: with Config.Warning, an allowed request past a
// limit's warning threshold names it in X-RateLimit-Warning; hidden and
// shadow limits are never named, refusals carry no warning, and without
// Config.Warning nothing is sent.
func TestWarningHeader(t *testing.T) {
	c := newClock()
	store := memstore.New()
	api := newLimiter(t, store, sluice.FixedWindow{Limit: 4, Window: time.Minute}, "api", c, sluice.WithWarning(50))
	hidden := newLimiter(t, store, sluice.FixedWindow{Limit: 4, Window: time.Minute}, "hidden", c, sluice.WithWarning(1))
	shadow := newLimiter(t, store, sluice.FixedWindow{Limit: 4, Window: time.Minute}, "shadow", c, sluice.WithWarning(1), sluice.WithShadow(true))
	limits := []Limit{
		{Limiter: api, Key: ClientAddr(nil)},
		{Limiter: hidden, Key: ClientAddr(nil), Hidden: true},
		{Limiter: shadow, Key: ClientAddr(nil)},
	}
	h := newMiddleware(t, Config{Limits: limits, Warning: true})
	want := []string{"", `"api"`, `"api"`, `"api"`, ""} // 1 used: 25%; 2: 50%; ...; the 5th is refused
	for i, w := range want {
		rec := serve(h, "192.0.2.1:1")
		if got := rec.Header().Get(HeaderWarning); got != w {
			t.Fatalf("request %d (%d): %s = %q, want %q", i+1, rec.Code, HeaderWarning, got, w)
		}
		if (i == 4) != (rec.Code == 429) {
			t.Fatalf("request %d: %d", i+1, rec.Code)
		}
	}
	off := newMiddleware(t, Config{Limits: limits})
	if rec := serve(off, "192.0.2.2:1"); rec.Header().Get(HeaderWarning) != "" {
		t.Fatalf("without Config.Warning: %v", rec.Header())
	}
}
