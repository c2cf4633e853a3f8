package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/waiting"
)

// Waiting instead of refusing (Limit.Wait, Config.MaxWaiting,
// Config.MaxWaitingPerKey).

// The default bounds on waiting requests.
const (
	DefaultMaxWaiting       = 1000
	DefaultMaxWaitingPerKey = 10
)

// waitKey names a limit (its index in Config.Limits) and key of a
// waiting place.
type waitKey struct {
	limit int
	key   string
}

// Waiting returns the number of requests waiting for admission now.
func (m *Middleware) Waiting() int {
	return m.waiters.Waiting()
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

// nextTry returns how long st, refused after waiting elapsed and deciding
// tries+1 times, waits before deciding again, and false when it must not
// wait (waiting.Schedule, with each refusing limit's Wait).
func (m *Middleware) nextTry(st *Status, applied []int, elapsed time.Duration, tries int) (time.Duration, bool) {
	var s waiting.Schedule
	for j, ls := range st.Limits {
		if !ls.Result.Allowed {
			l := m.limits[applied[j]]
			s.Refused(l.Wait, ls.Result.RetryAfter, l.Limiter.Rule().Algorithm)
		}
	}
	return s.Next(elapsed, tries)
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
			m.waiters.Leave(keys)
		}
	}()
	for tries := 0; !st.Allowed; tries++ {
		delay, ok := m.nextTry(st, applied, time.Since(start), tries)
		if !ok {
			return st, nil
		}
		if !entered {
			if entered = m.waiters.Enter(keys); !entered {
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
