package server

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/waiting"
)

// Waiting instead of refusing (a policy's wait): a request its policies
// refuse waits for admission in /v1/check, reservations and forward auth,
// with the arithmetic of sluice.Limiter.Wait and httplimit's Limit.Wait,
// within the service-wide bounds max_waiting and max_waiting_per_key.

// waitKey names a policy's limiter and a key of a waiting place.
type waitKey struct{ limiter, key string }

// newWaiters returns the service's waiting places, with the default
// bounds until a configuration is applied (setWaitBounds).
func newWaiters() *waiting.Places[waitKey] {
	return waiting.NewPlaces[waitKey](config.DefaultMaxWaiting, config.DefaultMaxWaitingPerKey)
}

// StopWaiting answers every request waiting for admission with its
// refusal at once, and refuses those that would wait from then on at
// once: sluice serve calls it when it shuts down, so that its grace period
// is not spent on waits.
func (s *Server) StopWaiting() { s.waiters.Stop() }

// setWaitBounds applies a configuration's bounds (0: the default); those
// waiting stay.
func (s *Server) setWaitBounds(total, perKey int) {
	if total <= 0 {
		total = config.DefaultMaxWaiting
	}
	if perKey <= 0 {
		perKey = config.DefaultMaxWaitingPerKey
	}
	s.waiters.SetBounds(total, perKey)
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
	gauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_server_waiting",
		Help: "Requests waiting for admission now (at most max_waiting).",
	}, func() float64 { return float64(s.waiters.Waiting()) })
	return []prometheus.Collector{s.waitsTotal, gauge}
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
			s.waiters.Leave(keys)
		}
	}()
	for tries := 0; ; tries++ {
		delay, ok := w.next(time.Since(start), res, tries)
		if !ok || s.waiters.Stopped() {
			s.countWaits(waited, waitRefused)
			return d, nil
		}
		if !entered {
			if entered = s.waiters.Enter(keys); !entered {
				s.countWaits(waited, waitFull)
				return d, nil
			}
		}
		if !sleep(ctx, s.waiters.Done(), delay) {
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
// so far, sleeps before it decides again (waiting.Schedule, with each
// refusing check's bound); false when it must be refused at once.
func (w *wait[D]) next(elapsed time.Duration, res []sluice.Result, tries int) (time.Duration, bool) {
	var s waiting.Schedule
	for i, r := range res {
		if !r.Allowed {
			s.Refused(w.bound(i), r.RetryAfter, w.pols[i].cfg.Algorithm)
		}
	}
	return s.Next(elapsed, tries)
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
