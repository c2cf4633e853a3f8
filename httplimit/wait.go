package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// Waiting instead of refusing (Limit.Wait, Config.MaxWaiting,
// Config.MaxWaitingPerKey).

// The default bounds on waiting requests.
const (
	DefaultMaxWaiting       = 1000
	DefaultMaxWaitingPerKey = 10
)

// waiters bounds the requests waiting at once: in total, and per limit and
// key. It holds an entry only per (limit, key) with a waiter, so its memory
// is bounded by the total.
type waiters struct {
	mu         sync.Mutex
	total, max int
	perKey     map[waitKey]int
	maxPerKey  int
}

type waitKey struct {
	limit int
	key   string
}

func newWaiters(maxTotal, maxPerKey int) *waiters {
	return &waiters{max: maxTotal, maxPerKey: maxPerKey, perKey: map[waitKey]int{}}
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

// Waiting returns the number of requests waiting for admission now.
func (m *Middleware) Waiting() int {
	m.waiters.mu.Lock()
	defer m.waiters.mu.Unlock()
	return m.waiters.total
}

// checkWaitConfig validates the waiting bounds of cfg and of its limits,
// and refuses what a limiter in shadow mode would never apply.
func checkWaitConfig(cfg *Config) error {
	if cfg.MaxWaiting < 0 || cfg.MaxWaitingPerKey < 0 {
		return fmt.Errorf("httplimit: MaxWaiting and MaxWaitingPerKey must not be negative, got %d and %d", cfg.MaxWaiting, cfg.MaxWaitingPerKey)
	}
	for i, l := range cfg.Limits {
		if l.Wait < 0 {
			return fmt.Errorf("httplimit: limit %d: Wait must not be negative, got %v", i, l.Wait)
		}
		if l.Wait > 0 && l.Limiter != nil && l.Limiter.Rule().CountRejected {
			return fmt.Errorf("httplimit: limit %d: Wait cannot apply to a limiter with CountRejected (every retry while waiting would count as a refusal)", i)
		}
		if l.Limiter != nil && l.Limiter.Shadow() && (l.Wait > 0 || l.DenyStatus != 0 || l.DenyBody != nil) {
			return fmt.Errorf("httplimit: limit %d: Wait, DenyStatus and DenyBody cannot apply to a limiter in shadow mode (it never refuses)", i)
		}
	}
	return nil
}

// waitBound returns how long st may still wait, all told, for its
// refusing limits: the least Wait among them (0 when one does not wait).
func (m *Middleware) waitBound(st *Status, applied []int) time.Duration {
	bound := time.Duration(-1)
	for j, ls := range st.Limits {
		if ls.Result.Allowed {
			continue
		}
		w := m.limits[applied[j]].Wait
		if bound < 0 || w < bound {
			bound = w
		}
	}
	return max(bound, 0)
}

// nextTry returns how long st, refused after waiting elapsed and deciding
// tries+1 times, waits before deciding again, and false when it must not
// wait: a refusing rate limit's RetryAfter is exact, and a wait past the
// bound is refused at once; an in-flight limit's RetryAfter is only an
// upper bound (a release may free a slot sooner), so while one refuses
// the request tries again every leasePoll (up to its RetryAfter and the
// bound), until the bound has passed.
func (m *Middleware) nextTry(st *Status, applied []int, elapsed time.Duration, tries int) (time.Duration, bool) {
	left := m.waitBound(st, applied) - elapsed
	var rate time.Duration
	lease := time.Duration(-1)
	for j, ls := range st.Limits {
		switch {
		case ls.Result.Allowed:
		case m.limits[applied[j]].Limiter.Rule().Algorithm == driver.AlgorithmInFlight:
			lease = max(lease, ls.Result.RetryAfter)
		default:
			rate = max(rate, ls.Result.RetryAfter)
		}
	}
	return waitDelay(rate, lease, left, tries)
}

// leasePoll is the first pause of a request waiting for an in-flight
// slot; each next pause doubles it, up to maxLeasePoll.
const (
	leasePoll    = 5 * time.Millisecond
	maxLeasePoll = 100 * time.Millisecond
)

// waitDelay is the pause before the next decision of a refused request
// with left of its wait bound to go, and whether it waits at all: rate is
// the longest RetryAfter of the refusing rate limits (0 for none), lease
// the longest of the refusing in-flight limits (negative for none), tries
// how many pauses came before.
func waitDelay(rate, lease, left time.Duration, tries int) (time.Duration, bool) {
	delay := max(rate, time.Millisecond)
	if lease >= 0 {
		poll := min(leasePoll<<min(tries, 5), maxLeasePoll, max(lease, time.Millisecond), left)
		delay = max(rate, poll)
	}
	return delay, left > 0 && delay <= left
}

// checkWaiting is Check, waiting for admission while the refusing limits
// allow (Limit.Wait): it sleeps the refusal's RetryAfter and decides
// again, as sluice.Limiter.Wait does, and returns the refusal at once when
// RetryAfter would take it past the bound, when the waiting places are
// taken, or when the client goes away (then with the context's error). A
// waiting request takes nothing: refused decisions take nothing, and it
// decides again only when its wait is over.
func (m *Middleware) checkWaiting(r *http.Request) (*Status, error) {
	st, applied, err := m.check(r)
	if err != nil || st == nil || st.Allowed || !m.waits {
		return st, err
	}
	start := time.Now()
	var keys []waitKey
	for j, ls := range st.Limits {
		if !ls.Result.Allowed {
			keys = append(keys, waitKey{limit: applied[j], key: ls.Key})
		}
	}
	entered := false
	defer func() {
		if entered {
			m.waiters.leave(keys)
		}
	}()
	for tries := 0; !st.Allowed; tries++ {
		delay, ok := m.nextTry(st, applied, time.Since(start), tries)
		if !ok {
			return st, nil
		}
		if !entered {
			if entered = m.waiters.enter(keys); !entered {
				return st, nil
			}
		}
		if err := sleep(r.Context(), delay); err != nil {
			return nil, err
		}
		if st, applied, err = m.check(r); err != nil || st == nil {
			return st, err
		}
	}
	return st, nil
}

// sleep waits d, or until ctx ends (then returning its error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
