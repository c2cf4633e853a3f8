package httplimit_test

import (
	"context"
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

func meteredLimiter(t *testing.T, opts ...sluice.Option) *sluice.Limiter {
	t.Helper()
	l, err := sluice.New(memstore.New(), sluice.FixedWindow{Limit: 1000, Window: time.Hour}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestMeteredConfig: what Metered cannot enforce is refused.
func TestMeteredConfig(t *testing.T) {
	on := sluice.WithReservations(sluice.ReserveOptions{})
	tok := meteredLimiter(t, on)
	key := httplimit.Constant("k")
	est := func(*http.Request) (int64, error) { return 1, nil }
	act := httplimit.HeaderActual("X-Usage")
	for _, c := range []struct {
		cfg  httplimit.MeteredConfig
		want string
	}{
		{httplimit.MeteredConfig{Key: key, Estimate: est, Actual: act}, "Tokens is required"},
		{httplimit.MeteredConfig{Tokens: meteredLimiter(t), Key: key, Estimate: est, Actual: act}, "not made sluice.WithReservations"},
		{httplimit.MeteredConfig{Tokens: tok, Requests: meteredLimiter(t), Key: key, Estimate: est, Actual: act}, "Requests"},
		{httplimit.MeteredConfig{Tokens: tok, Estimate: est, Actual: act}, "Key is required"},
		{httplimit.MeteredConfig{Tokens: tok, Key: key, Actual: act}, "Estimate is required"},
		{httplimit.MeteredConfig{Tokens: tok, Key: key, Estimate: est}, "Actual is required"},
	} {
		if _, err := httplimit.NewMetered(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v, want %q", err, c.want)
		}
	}
}

// TestMeteredPanicSettlesOnMissing: a handler that panics is settled as
// OnMissing says (by default the estimate), and the panic goes on.
func TestMeteredPanicSettlesOnMissing(t *testing.T) {
	tok := meteredLimiter(t, sluice.WithReservations(sluice.ReserveOptions{}))
	m, err := httplimit.NewMetered(httplimit.MeteredConfig{Tokens: tok, Key: httplimit.Constant("k"),
		Estimate: httplimit.MaxTokens(10, 1<<10), Actual: httplimit.HeaderActual("X-Usage")})
	if err != nil {
		t.Fatal(err)
	}
	var body string
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		body = string(b)
		panic("boom")
	}))
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not go on")
			}
		}()
		// max_completion_tokens wins over max_tokens; 40 bytes are 10 tokens of prompt.
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/", strings.NewReader(`{"max_tokens":5,"max_completion_tokens":90}`)))
	}()
	if body != `{"max_tokens":5,"max_completion_tokens":90}` {
		t.Errorf("the handler read %q: the body was not put back", body)
	}
	if res, _ := tok.Peek(context.Background(), httplimit.Constant("k")(nil)); res.Remaining != 1000-100 {
		t.Errorf("after a panic: %d left, want the estimate (100) charged", res.Remaining)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("POST", "/", strings.NewReader(`{"max_tokens":-1}`)))
	if w.Code != 400 {
		t.Errorf("a negative max_tokens: %d, want 400", w.Code)
	}
}

func TestResetText(t *testing.T) {
	for d, want := range map[time.Duration]string{6 * time.Minute: "6m0s", time.Second: "1s", 1500 * time.Microsecond: "2ms", 0: "0s", -time.Second: "0s"} {
		if got := httplimit.ResetText(d); got != want {
			t.Errorf("ResetText(%v) = %q, want %q", d, got, want)
		}
	}
}
