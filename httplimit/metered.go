package httplimit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// Metered limits work priced after it is done, such as the tokens an LLM
// call consumes: before the handler runs it reserves an estimate taken
// from the request (sluice.ReserveAll: requests and tokens together, a
// refusal by either taking nothing from the other), and once the handler
// has returned it settles the real amount read from the response
// (sluice.SettleAll). Requests already in flight hold their estimates, so
// concurrency cannot overshoot the limit by more than the estimates miss
// (and the debt bound).
type Metered struct {
	cfg MeteredConfig
}

// MeteredConfig configures a Metered. Tokens and Key are required.
type MeteredConfig struct {
	// Requests, when set, limits requests: each reserves 1 and settles 1.
	Requests *sluice.Limiter
	// Tokens limits the metered units; it must be made
	// sluice.WithReservations (as Requests).
	Tokens *sluice.Limiter
	// Key returns the identity counted against both (a tenant, an API
	// key); "" refuses the request with 400.
	Key KeyFunc
	// Estimate returns the units to reserve for r (for example its
	// max_tokens: see MaxTokens). It may read r.Body if it puts back what
	// it read. An error answers 400 with its text.
	Estimate func(r *http.Request) (int64, error)
	// Actual returns the units the response used, from its status and
	// header, which holds the trailers the handler set too (for example
	// an upstream's usage figure: see HeaderActual); ok false when the
	// response has none.
	Actual func(status int, header http.Header) (n int64, ok bool)
	// OnMissing returns what is settled when Actual has no figure or the
	// handler panicked (status 0): by default the estimate, so that a
	// failed call costs what was reserved; return 0 to charge nothing.
	OnMissing func(r *http.Request, status int, estimate int64) int64
	// Headers adds, before the handler writes, the headers OpenAI's SDKs
	// read: x-ratelimit-limit-requests, x-ratelimit-remaining-requests,
	// x-ratelimit-reset-requests and the -tokens triple (resets written as
	// Go durations, such as 6m0s), after the reservation.
	Headers bool
	// Deny writes the refusal (default: 429 with Retry-After and a
	// problem+json body naming the limits).
	Deny func(w http.ResponseWriter, r *http.Request, d sluice.ReserveDecision)
	// Logger is where failed settles are logged (default slog.Default()).
	Logger *slog.Logger
}

// NewMetered returns a Metered, refusing a configuration it cannot
// enforce.
func NewMetered(cfg MeteredConfig) (*Metered, error) {
	switch {
	case cfg.Tokens == nil:
		return nil, errors.New("httplimit: MeteredConfig.Tokens is required")
	case !cfg.Tokens.Reservations():
		return nil, fmt.Errorf("httplimit: MeteredConfig.Tokens (%s) is not made sluice.WithReservations", cfg.Tokens.Name())
	case cfg.Requests != nil && !cfg.Requests.Reservations():
		return nil, fmt.Errorf("httplimit: MeteredConfig.Requests (%s) is not made sluice.WithReservations", cfg.Requests.Name())
	case cfg.Key == nil:
		return nil, errors.New("httplimit: MeteredConfig.Key is required")
	case cfg.Estimate == nil:
		return nil, errors.New("httplimit: MeteredConfig.Estimate is required")
	case cfg.Actual == nil:
		return nil, errors.New("httplimit: MeteredConfig.Actual is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Metered{cfg: cfg}, nil
}

// Handler returns next behind the limits.
func (m *Metered) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &m.cfg
		key := c.Key(r)
		if key == "" {
			http.Error(w, "httplimit: no key for the request", http.StatusBadRequest)
			return
		}
		est, err := c.Estimate(r)
		if err != nil {
			http.Error(w, "httplimit: "+err.Error(), http.StatusBadRequest)
			return
		}
		if limit := c.Tokens.Rule().Limit; est < 0 || est > limit {
			http.Error(w, fmt.Sprintf("httplimit: the request's estimate %d is outside 0 to the limit %d", est, limit), http.StatusBadRequest)
			return
		}
		var checks []sluice.Check
		if c.Requests != nil {
			checks = append(checks, sluice.Check{Limiter: c.Requests, Key: key, Cost: 1})
		}
		checks = append(checks, sluice.Check{Limiter: c.Tokens, Key: key, Cost: est})
		d, err := sluice.ReserveAll(r.Context(), checks)
		if err != nil {
			http.Error(w, "httplimit: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if c.Headers {
			m.writeHeaders(w.Header(), d)
		}
		if !d.Allowed {
			if c.Deny != nil {
				c.Deny(w, r, d)
				return
			}
			denyMetered(w, d)
			return
		}
		rec := &statusWriter{ResponseWriter: w}
		settled := false
		defer func() {
			if settled {
				return
			}
			// The handler panicked: settle as OnMissing says, then go on
			// panicking.
			m.settle(r, d, key, 0, w.Header(), est, false)
		}()
		next.ServeHTTP(rec, r)
		settled = true
		m.settle(r, d, key, rec.status(), w.Header(), est, true)
	})
}

// settle settles the reservations of d from the response.
func (m *Metered) settle(r *http.Request, d sluice.ReserveDecision, key string, status int, h http.Header, est int64, ran bool) {
	c := &m.cfg
	actual, ok := int64(0), false
	if ran {
		actual, ok = c.Actual(status, h)
	}
	if !ok {
		actual = est
		if c.OnMissing != nil {
			actual = c.OnMissing(r, status, est)
		}
	}
	actual = max(0, min(actual, driver.MaxSettle))
	var sc []sluice.SettleCheck
	for i, rv := range d.Reservations {
		a := actual
		if c.Requests != nil && i == 0 {
			a = 1
		}
		sc = append(sc, sluice.SettleCheck{Limiter: rv.Limiter(), Key: key, Reservation: rv.ID, Actual: a})
	}
	// The request may be gone by now: the settle must happen anyway.
	out, err := sluice.SettleAll(contextWithoutCancel(r), sc)
	if err == nil {
		for _, s := range out {
			if s.Err != nil {
				err = s.Err
			}
		}
	}
	if err != nil {
		c.Logger.Warn("httplimit: settle failed; the estimate stays charged", "key", key, "err", err)
	}
}

func (m *Metered) writeHeaders(h http.Header, d sluice.ReserveDecision) {
	set := func(kind string, res sluice.Result) {
		h["X-Ratelimit-Limit-"+kind] = []string{strconv.FormatInt(res.Limit, 10)}
		h["X-Ratelimit-Remaining-"+kind] = []string{strconv.FormatInt(res.Remaining, 10)}
		h["X-Ratelimit-Reset-"+kind] = []string{ResetText(res.ResetAfter)}
	}
	i := 0
	if m.cfg.Requests != nil {
		set("Requests", d.Reservations[0].Result)
		i = 1
	}
	set("Tokens", d.Reservations[i].Result)
}

// ResetText writes d as OpenAI's x-ratelimit-reset-* headers do: a Go
// duration rounded up to the millisecond, such as 6m0s, 1s or 20ms ("0s"
// when d is not positive).
func ResetText(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	return ((d + time.Millisecond - 1) / time.Millisecond * time.Millisecond).String()
}

func denyMetered(w http.ResponseWriter, d sluice.ReserveDecision) {
	var names []string
	for _, rv := range d.Reservations {
		if !rv.Allowed {
			names = append(names, rv.Limiter().Name())
		}
	}
	secs := RetryAfterSeconds(d.RetryAfter())
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusTooManyRequests)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": "Too Many Requests", "status": 429,
		"detail": fmt.Sprintf("refused by %v; retry after %ds", names, secs), "violated_policies": names})
}

// statusWriter records the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the writer (Flush, for
// streamed responses).
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusWriter) status() int {
	if s.code == 0 {
		return http.StatusOK
	}
	return s.code
}

// MaxTokens is an Estimate for JSON request bodies of OpenAI's form: the
// body's max_tokens (or max_completion_tokens) plus its length in bytes
// divided by four (a prompt's tokens, by OpenAI's rule of thumb), or def
// when the body gives no maximum. The body is read up to maxBody bytes
// and put back.
func MaxTokens(def, maxBody int64) func(r *http.Request) (int64, error) {
	return func(r *http.Request) (int64, error) {
		if r.Body == nil {
			return def, nil
		}
		data, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		r.Body.Close()
		if err != nil {
			return 0, fmt.Errorf("reading the body: %w", err)
		}
		if int64(len(data)) > maxBody {
			return 0, fmt.Errorf("the body is larger than %d bytes", maxBody)
		}
		r.Body = io.NopCloser(bytes.NewReader(data))
		var b struct {
			MaxTokens           *int64 `json:"max_tokens"`
			MaxCompletionTokens *int64 `json:"max_completion_tokens"`
		}
		if len(bytes.TrimSpace(data)) > 0 {
			if err := json.Unmarshal(data, &b); err != nil {
				return 0, fmt.Errorf("the body is not a JSON object: %w", err)
			}
		}
		n := def
		switch {
		case b.MaxCompletionTokens != nil:
			n = *b.MaxCompletionTokens
		case b.MaxTokens != nil:
			n = *b.MaxTokens
		}
		if n < 0 {
			return 0, fmt.Errorf("max_tokens %d is negative", n)
		}
		return n + int64(len(data))/4, nil
	}
}

// HeaderActual is an Actual reading a whole number from the response
// header or trailer name (such as an upstream's x-usage-total-tokens);
// none, or one that is not a whole number from 0, is no figure.
func HeaderActual(name string) func(status int, header http.Header) (int64, bool) {
	return func(_ int, h http.Header) (int64, bool) {
		v := h.Get(name)
		if v == "" {
			v = h.Get(http.TrailerPrefix + name)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil && n >= 0
	}
}

// contextWithoutCancel is r's context without its cancellation (the client
// may be gone by the time the response is settled).
func contextWithoutCancel(r *http.Request) context.Context {
	return context.WithoutCancel(r.Context())
}
