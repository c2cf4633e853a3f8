package server

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
)

// Waiting instead of refusing (a policy's wait): a request its policies
// refuse waits for admission in /v1/check, reservations and forward auth,
// with the arithmetic of sluice.Limiter.Wait and httplimit's Limit.Wait,
// within the service-wide bounds max_waiting and max_waiting_per_key.

// waiters bounds the requests waiting at once: in total, and per limiter
// and key. It outlives the configurations (a reload changes its bounds,
// not who waits) and holds an entry only per (limiter, key) with a
// waiter, so its memory is bounded by the total.
type waiters struct {
	mu         sync.Mutex
	total, max int
	perKey     map[waitKey]int
	maxPerKey  int
	// stop is closed when the server stops (StopWaiting): whoever waits
	// is answered at once, and no one waits any more.
	stop     chan struct{}
	stopOnce sync.Once
}

type waitKey struct{ limiter, key string }

func newWaiters() *waiters {
	return &waiters{perKey: map[waitKey]int{}, max: config.DefaultMaxWaiting, maxPerKey: config.DefaultMaxWaitingPerKey, stop: make(chan struct{})}
}

// StopWaiting answers every request waiting for admission with its
// refusal at once, and refuses those that would wait from then on at
// once: sluice serve calls it when it shuts down, so that its grace period
// is not spent on waits.
func (s *Server) StopWaiting() {
	s.waiters.stopOnce.Do(func() { close(s.waiters.stop) })
}

// stopped reports whether StopWaiting was called.
func (w *waiters) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// setBounds applies a configuration's bounds (0: the default); those
// waiting stay.
func (w *waiters) setBounds(total, perKey int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.max, w.maxPerKey = config.DefaultMaxWaiting, config.DefaultMaxWaitingPerKey
	if total > 0 {
		w.max = total
	}
	if perKey > 0 {
		w.maxPerKey = perKey
	}
}

// enter takes a waiting place for keys, or reports false (taking none)
// when the total or a key's bound is reached.
func (w *waiters) enter(keys []waitKey) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.total >= w.max {
		return false
	}
	for _, k := range keys {
		if w.perKey[k] >= w.maxPerKey {
			return false
		}
	}
	w.total++
	for _, k := range keys {
		w.perKey[k]++
	}
	return true
}

// leave gives back the place enter took for keys.
func (w *waiters) leave(keys []waitKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.total--
	for _, k := range keys {
		if w.perKey[k]--; w.perKey[k] <= 0 {
			delete(w.perKey, k)
		}
	}
}

// waiting is the number of requests waiting now.
func (w *waiters) waiting() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.total
}

// The outcomes of a wait, sluice_server_waits_total's outcome label.
const (
	waitAdmitted  = "admitted"  // allowed after waiting
	waitRefused   = "refused"   // the wait would pass the least wait of the refusing policies
	waitFull      = "full"      // no waiting place: max_waiting or max_waiting_per_key reached
	waitAbandoned = "abandoned" // the client went away while waiting
)

// waitMetrics are sluice_server_waits_total{limiter,outcome} and
// sluice_server_waiting.
func (s *Server) waitMetrics() []prometheus.Collector {
	s.waitsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_server_waits_total",
		Help: "Requests refused by a policy with wait, by the policy's limiter and how their wait ended: admitted, refused (the wait would pass the bound), full (no waiting place), abandoned (the client went away).",
	}, []string{"limiter", "outcome"})
	waiting := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_server_waiting",
		Help: "Requests waiting for admission now (at most max_waiting).",
	}, func() float64 { return float64(s.waiters.waiting()) })
	return []prometheus.Collector{s.waitsTotal, waiting}
}

// wait is one request's wait for admission: the checks' policies and
// keys, and the decision to make again after each sleep.
type wait[D any] struct {
	pols []*policy
	keys []string
	// costs are the checks' costs: a check of cost 0 (a peek) takes
	// nothing and never waits.
	costs   []int64
	results func(D) []sluice.Result
	decide  func(context.Context) (D, error)
}

// bound is how long check i may wait: its policy's wait, 0 for a peek.
func (w *wait[D]) bound(i int) time.Duration {
	if w.costs[i] == 0 {
		return 0
	}
	return w.pols[i].cfg.Wait
}

// admit decides (w.decide) and returns the decision, or when policies
// with wait refuse it, the decision after waiting for admission: it sleeps the refusal's RetryAfter and
// decides again, as sluice.Limiter.Wait does, and returns the refusal at
// once when the wait would take it past the least wait of the policies
// refusing it, when no waiting place is free, or when the server stops
// (StopWaiting). A client that goes away leaves at once (the context's
// error). A waiting request takes nothing:
// a refused decision takes nothing, and it decides again only when its
// sleep is over.
func admit[D any](ctx context.Context, s *Server, w wait[D]) (D, error) {
	d, err := w.decide(ctx)
	if err != nil {
		return d, err
	}
	res := w.results(d)
	waited := w.waitingPolicies(res)
	if len(waited) == 0 {
		return d, nil
	}
	keys := waitPlaces(w.pols, w.keys, res)
	start := time.Now()
	entered := false
	defer func() {
		if entered {
			s.waiters.leave(keys)
		}
	}()
	for {
		delay, ok := w.next(time.Since(start), res)
		if !ok || s.waiters.stopped() {
			s.countWaits(waited, waitRefused)
			return d, nil
		}
		if !entered {
			if entered = s.waiters.enter(keys); !entered {
				s.countWaits(waited, waitFull)
				return d, nil
			}
		}
		if !sleep(ctx, s.waiters.stop, delay) {
			continue // stopped: answered refused above
		}
		if err = ctx.Err(); err == nil {
			d, err = w.decide(ctx)
		}
		if err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				s.countWaits(waited, waitAbandoned)
			}
			return d, err
		}
		if res = w.results(d); allAllowed(res) {
			s.countWaits(waited, waitAdmitted)
			return d, nil
		}
	}
}

// next says how long a request refused with res, having waited elapsed
// so far, sleeps before it decides again: the longest RetryAfter of the
// refusing checks (at least 1ms, as sluice.Limiter.Wait); false when that
// would take it past the least bound of the refusing checks.
func (w *wait[D]) next(elapsed time.Duration, res []sluice.Result) (time.Duration, bool) {
	delay := max(longestRetry(res), time.Millisecond)
	return delay, elapsed+delay <= w.waitBound(res)
}

// waitingPolicies are the distinct policies with wait among those
// refusing res: a wait's outcome counts for each.
func (w *wait[D]) waitingPolicies(res []sluice.Result) []*policy {
	var out []*policy
	for i, r := range res {
		if r.Allowed || w.bound(i) <= 0 || containsPolicy(out, w.pols[i]) {
			continue
		}
		out = append(out, w.pols[i])
	}
	return out
}

func containsPolicy(ps []*policy, p *policy) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// waitPlaces are the waiting places a request refused with res takes:
// one per refusing policy and key (a key checked twice takes one).
func waitPlaces(pols []*policy, keys []string, res []sluice.Result) []waitKey {
	var out []waitKey
	for i, r := range res {
		k := waitKey{limiter: pols[i].cfg.Limiter, key: keys[i]}
		if !r.Allowed && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// waitBound is the least bound of the checks refusing res (0 when one of
// them does not wait): how long the request may wait, all told.
func (w *wait[D]) waitBound(res []sluice.Result) time.Duration {
	bound := time.Duration(-1)
	for i, r := range res {
		if !r.Allowed && (bound < 0 || w.bound(i) < bound) {
			bound = w.bound(i)
		}
	}
	return max(bound, 0)
}

// longestRetry is the longest RetryAfter of the refusing results.
func longestRetry(res []sluice.Result) time.Duration {
	var d time.Duration
	for _, r := range res {
		if !r.Allowed {
			d = max(d, r.RetryAfter)
		}
	}
	return d
}

func allAllowed(res []sluice.Result) bool {
	for _, r := range res {
		if !r.Allowed {
			return false
		}
	}
	return true
}

// countWaits counts a wait's outcome for each of its policies.
func (s *Server) countWaits(pols []*policy, outcome string) {
	for _, p := range pols {
		s.waitsTotal.WithLabelValues(p.cfg.Limiter, outcome).Inc()
	}
}

// sleep waits d, or until ctx ends or stop is closed; it reports false
// when stop ended it (ctx.Err() says whether ctx did).
func sleep(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-stop:
		return false
	case <-t.C:
	}
	return true
}

// allowAllWait is the wait of checks decided together (sluice.AllowAll),
// pols[i] the policy of checks[i].
func allowAllWait(checks []sluice.Check, pols []*policy) wait[sluice.Decision] {
	keys, costs := checkKeys(checks)
	return wait[sluice.Decision]{
		pols: pols, keys: keys, costs: costs,
		results: func(d sluice.Decision) []sluice.Result { return d.Results },
		decide:  func(ctx context.Context) (sluice.Decision, error) { return sluice.AllowAll(ctx, checks) },
	}
}

// reserveAllWait is the wait of reservations made together
// (sluice.ReserveAll), pols[i] the policy of checks[i].
func reserveAllWait(checks []sluice.Check, pols []*policy) wait[sluice.ReserveDecision] {
	keys, costs := checkKeys(checks)
	return wait[sluice.ReserveDecision]{
		pols: pols, keys: keys, costs: costs,
		results: func(d sluice.ReserveDecision) []sluice.Result {
			res := make([]sluice.Result, len(d.Reservations))
			for i, rv := range d.Reservations {
				res[i] = rv.Result
			}
			return res
		},
		decide: func(ctx context.Context) (sluice.ReserveDecision, error) { return sluice.ReserveAll(ctx, checks) },
	}
}

// checkKeys are the keys and costs of checks.
func checkKeys(checks []sluice.Check) (keys []string, costs []int64) {
	keys, costs = make([]string, len(checks)), make([]int64, len(checks))
	for i, c := range checks {
		keys[i], costs[i] = c.Key, c.Cost
	}
	return keys, costs
}
