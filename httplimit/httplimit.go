// Package httplimit is net/http middleware that enforces sluice limiters and
// tells clients about them.
//
// A Middleware checks the Limits of a Config on every request: each Limit is
// a sluice.Limiter and a KeyFunc saying whom to count (client address, API
// key, authenticated principal, a global constant, anything). Its Handler
// method has the shape func(http.Handler) http.Handler, so it works with
// net/http's ServeMux and any router; use one Middleware per route or group
// of routes for per-action budgets.
//
// # Several limits
//
// All Limits that apply to a request are checked together with
// sluice.AllowAll: the checks of limiters that share a store go to it in one
// batch (one round trip to Valkey), and the request is allowed only if every
// limit allows it. When one refuses, the units the others took are given
// back, so a refused request costs no budget. Each check is atomic; the
// group is not: between the batch and the refund another request may find
// those units taken (and be refused when it would have been allowed, never
// the reverse). On Valkey Cluster the keys of one request usually live in
// different slots, often on different nodes: each check is still atomic on
// the node that owns its key, and nothing more is.
//
// # Requests without a key
//
// A KeyFunc that finds no key for a request (Header and a request without
// the header) never makes the request unlimited by default: each Limit's
// Missing says what happens, Refuse (the default: 400, nothing counted),
// FallBack to another KeyFunc (such as ClientAddr), or Skip, for a limit
// meant for some requests only.
//
// # Responses
//
// A refused request gets 429 Too Many Requests, a Retry-After header in
// whole seconds (rounded up, at least 1) and an application/problem+json
// body (RFC 9457) of type
// https://iana.org/assignments/http-problem-types#quota-exceeded whose
// "violated-policies" member names the refusing limits, unless
// Config.DenyHandler answers instead. A Limit may choose another status
// (DenyStatus, such as 503) and a JSON body of its own (DenyBody): the
// refusing limit refused longest answers (Status.Denier).
//
// Every response to a request that some Limit applied to carries, unless
// switched off in Config (WriteHeaders writes them, for sluice serve too):
//
//   - X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset, the
//     conventional headers, for the most restrictive limit (the refusing
//     one with the longest wait, or else the one with the fewest units
//     remaining). X-RateLimit-Reset is the number of seconds until that
//     limit is fully restored, rounded up; with Config.ResetEpoch it is the
//     Unix time of that moment instead, rounded up once, as GitHub sends it.
//   - RateLimit-Policy and RateLimit, the structured fields (RFC 9651) of
//     draft-ietf-httpapi-ratelimit-headers, with one list item per limit
//     named by its quoted policy name: RateLimit-Policy: "api";q=100;w=60
//     gives the quota q per window w in seconds (for token buckets and
//     GCRA, the burst and the time to refill it from empty), and
//     RateLimit: "api";r=42;t=17 the units remaining and, as the draft
//     defines t, the seconds until more units are available: the window's
//     end for a fixed window, the next token for token buckets and GCRA.
//     The sliding algorithms' results do not always say when their oldest
//     unit leaves the window; t is then left out (the draft makes it
//     optional), and sent after a refusal of one unit and, for the sliding
//     log, when one unit is logged. On a refusal, the limits that allowed
//     show what they have once their units are given back.
//   - Retry-After on refusals, never earlier than a refusing limit's t.
//
// Two Limits with the same name are refused by New.
//
// # In-flight limits
//
// A Limit whose Limiter enforces sluice.InFlight (at most N requests at
// once per key) takes a lease for each allowed request and holds it for
// the request's lifetime: it is released when the handler returns or
// panics, and when the client goes away (the request's context ends). A
// handler that outlives the lease (a streaming response) has it renewed
// every third of the Lease; when a renewal finds the lease ended, the
// request's context is canceled, with the error (wrapping
// sluice.ErrLeaseLost) as its cause (context.Cause). A refusal answers 429
// with Retry-After, the time until the earliest lease ends at the latest.
// In-flight limits are not quotas per window: they are never shown in the
// rate-limit headers.
//
// # Failure and shadow mode
//
// Limiters decide by their fail mode when the store is unavailable, and
// shadow-mode limiters never refuse (see sluice.WithFailMode and
// sluice.WithShadow). A degraded decision is not advertised in headers,
// since nothing is known about the remaining budget: a fail-open limit lets
// the request through with the other limits' headers, a fail-closed one
// refuses it with Retry-After: 1. Limiters in shadow mode are never
// advertised, neither their policy nor their results, so a dark-launched
// limit stays invisible to clients.
//
// A [Config] configures a Middleware: it is data (what a configuration file or a
// flag set fills in, and a zero field its default), not the functional
// options (Option) with which package sluice and the stores configure
// what their constructors build; the Limiters in it carry those.
package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/waiting"
)

// A Limit is one limiter applied to requests.
type Limit struct {
	// Limiter decides. Required.
	Limiter *sluice.Limiter

	// Key returns whom the request is counted against; an empty key means
	// it found none, and Missing says what happens then. Required.
	Key KeyFunc

	// Missing is what happens to a request Key finds no key for: Refuse
	// (the zero value: the request is refused, see NoKeyError), Skip (the
	// limit does not apply to it) or FallBack (it is counted by another
	// KeyFunc's key).
	Missing Missing

	// Cost returns the units a request takes (default 1 for every
	// request). Zero only looks: the request is allowed while at least one
	// unit remains, and takes nothing. A cost above the limiter's limit is
	// a bug and is answered by Config.ErrorHandler.
	Cost func(r *http.Request) int64

	// Name is the policy name clients see in headers and in
	// violated-policies (default Limiter.Name()). 1 to 64 printable ASCII
	// characters.
	Name string

	// Hidden keeps the limit out of the rate-limit headers; it is still
	// enforced, and named in violated-policies when it refuses. Use it for
	// limits clients should not plan around, such as a global capacity.
	Hidden bool

	// DenyStatus is the HTTP status of the requests this limit refuses
	// (default 429; for example 503 for a limit that protects capacity
	// rather than fairness): 400 to 599. DenyBody, when set, is the JSON
	// document sent instead of the problem+json body, as
	// application/json. When several limits refuse one request, the one
	// refused longest answers (Status.Denier). A Config.DenyHandler
	// answers instead of both. New refuses both on a limiter in shadow
	// mode (it never refuses).
	DenyStatus int
	DenyBody   json.RawMessage

	// Wait is the longest a request this limit refuses may wait for
	// admission, all told, instead of being refused (default 0: refused at
	// once). A waiting request sleeps the refusal's RetryAfter and is
	// decided again, as sluice.Limiter.Wait does; it is refused at once
	// when the wait would exceed the least Wait of the limits refusing it,
	// or when Config.MaxWaiting or MaxWaitingPerKey requests already wait.
	// It takes nothing while it waits, and a client that goes away leaves
	// at once. New refuses Wait on a limiter with CountRejected or in shadow
	// mode. An
	// in-flight limit's RetryAfter is only an upper bound (a release may
	// free a slot sooner): a request it refuses tries again after 5ms,
	// then each time twice as long (at most 100ms, and never past the
	// RetryAfter), and is refused once the least Wait has passed.
	Wait time.Duration
}

// Config configures a Middleware.
type Config struct {
	// Limits are checked on every request that is not exempt, together, in
	// this order; header list items follow it too. At least one.
	Limits []Limit

	// Exempt, when set, lets requests for which it returns true through
	// without checking or counting them (health checks, internal callers,
	// CORS preflight requests). Default none.
	Exempt func(r *http.Request) bool

	// DenyHandler answers refused requests (default: 429 with a
	// problem+json body, see WriteProblem). When it runs, Retry-After and
	// the rate-limit headers are already set, and FromContext returns the
	// request's Status.
	DenyHandler http.Handler

	// ErrorHandler answers requests the limits could not be checked for:
	// a limit whose Missing is Refuse found no key for the request (a
	// *NoKeyError, matching ErrNoKey), the request's context ended, or a
	// KeyFunc or Cost returned what no limiter accepts (a cost above the
	// limit). A store failure is not such an error: the limiters' fail
	// modes decide. Default: a request without a key gets 400 with an
	// application/problem+json body naming the limit; otherwise the error
	// is logged and the client gets 503 if its context ended, 500
	// otherwise.
	ErrorHandler func(w http.ResponseWriter, r *http.Request, err error)

	// OmitXRateLimit switches off X-RateLimit-Limit, -Remaining and -Reset
	// (default sent).
	OmitXRateLimit bool

	// OmitRateLimit switches off the draft's RateLimit-Policy and RateLimit
	// fields (default sent).
	OmitRateLimit bool

	// ResetEpoch makes X-RateLimit-Reset the Unix time, in whole seconds
	// rounded up, at which the limit is fully restored, instead of the
	// number of seconds until then (the default). Delta seconds are immune
	// to clock skew between server and client; epoch seconds are what
	// GitHub's API and some clients expect.
	ResetEpoch bool

	// Now is the clock for ResetEpoch (default time.Now).
	Now func() time.Time

	// Warning sends HeaderWarning (X-RateLimit-Warning) on allowed
	// requests that crossed a limit's warning threshold
	// (sluice.WithWarning), naming those limits (default not sent).
	Warning bool

	// Logger receives errors (default slog.Default()).
	Logger *slog.Logger

	// MaxWaiting bounds the requests waiting for admission at once
	// (Limit.Wait; default DefaultMaxWaiting), MaxWaitingPerKey those
	// waiting for one key of one limit (default DefaultMaxWaitingPerKey):
	// past them a request is refused at once.
	MaxWaiting, MaxWaitingPerKey int
}

// A Middleware enforces limits on HTTP requests. It is safe for concurrent
// use.
type Middleware struct {
	cfg     Config
	limits  []limit
	waits   bool // some limit has a Wait
	waiters *waiting.Places[waitKey]
}

type limit struct {
	Limit
	name string
}

// New returns a Middleware for cfg, or an error when a Limit lacks its
// Limiter or Key, has FallBack(nil) for Missing, has an invalid Name, or has
// the Name of another Limit (one response would then carry two items of
// that name).
func New(cfg Config) (*Middleware, error) {
	if len(cfg.Limits) == 0 {
		return nil, errors.New("httplimit: no limits")
	}
	if err := checkWaitConfig(&cfg); err != nil {
		return nil, err
	}
	if cfg.MaxWaiting == 0 {
		cfg.MaxWaiting = DefaultMaxWaiting
	}
	if cfg.MaxWaitingPerKey == 0 {
		cfg.MaxWaitingPerKey = DefaultMaxWaitingPerKey
	}
	m := &Middleware{cfg: cfg, waiters: waiting.NewPlaces[waitKey](cfg.MaxWaiting, cfg.MaxWaitingPerKey)}
	names := make(map[string]int, len(cfg.Limits))
	for i, l := range cfg.Limits {
		name, err := l.checkedName(i)
		if err != nil {
			return nil, err
		}
		if err := checkResponse(l.DenyStatus, l.DenyBody); err != nil {
			return nil, fmt.Errorf("httplimit: limit %d (%s): %w", i, name, err)
		}
		if j, dup := names[name]; dup {
			return nil, fmt.Errorf("httplimit: limits %d and %d are both named %q; give one a Name", j, i, name)
		}
		names[name] = i
		m.limits = append(m.limits, limit{Limit: l, name: name})
		m.waits = m.waits || l.Wait > 0
	}
	m.defaults()
	return m, nil
}

// checkedName checks the i-th Limit l and returns its name: its Name, or
// its Limiter's.
func (l *Limit) checkedName(i int) (string, error) {
	if l.Limiter == nil || l.Key == nil {
		return "", fmt.Errorf("httplimit: limit %d needs a Limiter and a Key", i)
	}
	if l.Missing.kind == fallBack && l.Missing.fallback == nil {
		return "", fmt.Errorf("httplimit: limit %d: FallBack needs a KeyFunc", i)
	}
	name := l.Name
	if name == "" {
		name = l.Limiter.Name()
	}
	if err := checkPolicyName(name); err != nil {
		return "", fmt.Errorf("httplimit: limit %d: %w", i, err)
	}
	return name, nil
}

// defaults sets the unset fields of m's Config to their defaults.
func (m *Middleware) defaults() {
	if m.cfg.Now == nil {
		m.cfg.Now = time.Now
	}
	if m.cfg.Logger == nil {
		m.cfg.Logger = slog.Default()
	}
	if m.cfg.ErrorHandler == nil {
		m.cfg.ErrorHandler = m.defaultError
	}
	if m.cfg.DenyHandler == nil {
		m.cfg.DenyHandler = http.HandlerFunc(defaultDeny)
	}
}

// Handler returns next wrapped by the limits: next runs only for allowed
// requests, with the request's Status in its context (see FromContext).
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m.cfg.Exempt != nil && m.cfg.Exempt(r) {
			next.ServeHTTP(w, r)
			return
		}
		st, err := m.checkWaiting(r)
		if err != nil {
			m.cfg.ErrorHandler(w, r, err)
			return
		}
		if st == nil { // no limit applies
			next.ServeHTTP(w, r)
			return
		}
		WriteHeaders(w.Header(), st, HeaderOptions{
			OmitXRateLimit: m.cfg.OmitXRateLimit,
			OmitRateLimit:  m.cfg.OmitRateLimit,
			ResetEpoch:     m.cfg.ResetEpoch,
			Now:            m.cfg.Now(),
			Warning:        m.cfg.Warning,
		})
		r = r.WithContext(context.WithValue(r.Context(), statusKey{}, st))
		if !st.Allowed {
			m.cfg.DenyHandler.ServeHTTP(w, r)
			return
		}
		if leases := st.leases(); leases != nil {
			// In-flight limits: the leases live as long as the request.
			ctx, stop := sluice.Hold(r.Context(), leases...)
			defer stop()
			r = r.WithContext(ctx)
		}
		next.ServeHTTP(w, r)
	})
}

// checks are the checks of the limits that apply to r (applied: their
// indexes in m.limits), with their keys and costs.
func (m *Middleware) checks(r *http.Request) (checks []sluice.Check, applied []int, err error) {
	checks = make([]sluice.Check, 0, len(m.limits))
	applied = make([]int, 0, len(m.limits))
	for i := range m.limits {
		l := &m.limits[i]
		key, err := l.keyOf(r)
		if err != nil {
			return nil, nil, err
		}
		if key == "" { // Skip
			continue
		}
		checks = append(checks, sluice.Check{Limiter: l.Limiter, Key: key, Cost: l.costOf(r)})
		applied = append(applied, i)
	}
	return checks, applied, nil
}

// costOf is what r costs under l: 1 unless l has a Cost.
func (l *limit) costOf(r *http.Request) int64 {
	if l.Cost != nil {
		return l.Cost(r)
	}
	return 1
}

// Check decides the limits for r and takes what they cost, as Handler does,
// without answering: for handlers that limit part of their work themselves.
// The leases of in-flight limits (LimitStatus.Lease) are then the caller's
// to release.
// It returns a nil Status when no limit applies to r, and a *NoKeyError,
// counting nothing, when a limit that refuses requests without a key finds
// none for r.
// Check never waits (Limit.Wait is the Handler's).
func (m *Middleware) Check(r *http.Request) (*Status, error) {
	st, _, err := m.check(r)
	return st, err
}

// check is Check, and returns the index in m.limits of each limit of the
// Status.
func (m *Middleware) check(r *http.Request) (*Status, []int, error) {
	checks, applied, err := m.checks(r)
	if err != nil {
		return nil, nil, err
	}
	if len(checks) == 0 {
		return nil, nil, nil
	}
	d, err := sluice.AllowAll(r.Context(), checks)
	if err != nil {
		return nil, nil, err
	}
	st := &Status{Allowed: d.Allowed, Limits: make([]LimitStatus, len(applied))}
	for j, i := range applied {
		l := &m.limits[i]
		st.Limits[j] = LimitStatus{
			Name:   l.name,
			Key:    checks[j].Key,
			Rule:   InForce(l.Limiter.Rule(), d.Results[j]),
			Cost:   checks[j].Cost,
			Result: d.Results[j],
			Hidden: l.Hidden,
			Shadow: l.Limiter.Shadow(),

			DenyStatus: l.DenyStatus,
			DenyBody:   l.DenyBody,
		}
		if d.Leases != nil {
			st.Limits[j].Lease = d.Leases[j]
		}
	}
	return st, applied, nil
}

func (m *Middleware) defaultError(w http.ResponseWriter, r *http.Request, err error) {
	if nk, ok := errors.AsType[*NoKeyError](err); ok {
		writeNoKey(w, nk)
		return
	}
	if r.Context().Err() != nil {
		http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
		return
	}
	m.cfg.Logger.Error("httplimit: cannot check limits", "method", r.Method, "path", r.URL.Path, "err", err)
	http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
}

type statusKey struct{}

// FromContext returns the Status of the limits checked for the request
// whose context ctx is, in handlers behind a Middleware and in its
// DenyHandler.
func FromContext(ctx context.Context) (*Status, bool) {
	st, ok := ctx.Value(statusKey{}).(*Status)
	return st, ok
}

// Status is the outcome of a Middleware's limits for one request.
type Status struct {
	// Allowed reports whether every limit allowed the request.
	Allowed bool
	// Limits holds the limits that applied to the request (those that
	// found a key for it, by Key or by Missing's FallBack), in Config order.
	Limits []LimitStatus
}

// LimitStatus is one limit's part of a Status.
type LimitStatus struct {
	Name   string      // the policy name
	Key    string      // the identity counted against
	Rule   sluice.Rule // the rule in force for the key: the limiter's, or its override's (Rule.InForce)
	Cost   int64       // the units the request asked for
	Result sluice.Result
	Hidden bool // Limit.Hidden: never shown in headers
	Shadow bool // the limiter is in shadow mode: never shown in headers
	// Lease is, for an in-flight limit (sluice.InFlight) that allowed the
	// request, the lease it holds: Handler holds it for the request's
	// lifetime (sluice.Hold); a caller of Check releases it.
	Lease *sluice.Lease

	// DenyStatus and DenyBody are the limit's response to a refusal
	// (Limit.DenyStatus, Limit.DenyBody; zero: 429 with problem+json).
	DenyStatus int
	DenyBody   []byte
}

// RetryAfter returns the longest RetryAfter of the refusing limits: the
// earliest time the whole request could be allowed. Zero when allowed.
func (s *Status) RetryAfter() time.Duration {
	var d time.Duration
	for _, l := range s.Limits {
		if !l.Result.Allowed && l.Result.RetryAfter > d {
			d = l.Result.RetryAfter
		}
	}
	return d
}

// Violated returns the names of the limits that refused the request.
func (s *Status) Violated() []string {
	var names []string
	for _, l := range s.Limits {
		if !l.Result.Allowed {
			names = append(names, l.Name)
		}
	}
	return names
}

// RetryAfterSeconds returns d in whole seconds for a Retry-After header:
// rounded up, and at least 1, since "Retry-After: 0" invites an immediate
// retry that would be refused.
func RetryAfterSeconds(d time.Duration) int64 {
	return max(seconds(d), 1)
}

// seconds returns d in whole seconds, rounded up, never negative.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

func checkPolicyName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("policy name must be 1 to 64 characters, got %d", len(name))
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("policy name %q may hold only printable ASCII", name)
		}
	}
	return nil
}
