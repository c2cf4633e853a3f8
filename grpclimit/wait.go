package grpclimit

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Waiting instead of refusing (Limit.Wait, Config.MaxWaiting,
// Config.MaxWaitingPerKey), as httplimit's.

// The default bounds on waiting calls.
const (
	DefaultMaxWaiting       = 1000
	DefaultMaxWaitingPerKey = 10
)

// waiters bounds the calls waiting at once, in total and per limit and
// key; it holds an entry only per (limit, key) with a waiter.
type waiters struct {
	mu        sync.Mutex
	total     int
	max       int
	maxPerKey int
	perKey    map[waitKey]int
}

type waitKey struct {
	limit int
	key   string
}

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

// Waiting returns the number of calls waiting for admission now.
func (in *Interceptor) Waiting() int {
	in.waiters.mu.Lock()
	defer in.waiters.mu.Unlock()
	return in.waiters.total
}

// checkWait validates the waiting bounds of cfg and its limits, and
// refuses what a limiter in shadow mode would never apply.
func checkWait(cfg *Config) error {
	if cfg.MaxWaiting < 0 || cfg.MaxWaitingPerKey < 0 {
		return fmt.Errorf("%w: MaxWaiting and MaxWaitingPerKey must not be negative, got %d and %d", ErrInvalidConfig, cfg.MaxWaiting, cfg.MaxWaitingPerKey)
	}
	for i, l := range cfg.Limits {
		if l.Wait < 0 {
			return fmt.Errorf("%w: Limits[%d].Wait must not be negative, got %v", ErrInvalidConfig, i, l.Wait)
		}
		if l.Wait > 0 && l.Limiter != nil && l.Limiter.Rule().CountRejected {
			return fmt.Errorf("%w: Limits[%d].Wait cannot apply to a limiter with CountRejected (every retry while waiting would count as a refusal)", ErrInvalidConfig, i)
		}
		if l.Limiter != nil && l.Limiter.Shadow() && (l.Wait > 0 || l.DenyCode != codes.OK) {
			return fmt.Errorf("%w: Limits[%d]: Wait and DenyCode cannot apply to a limiter in shadow mode (it never refuses)", ErrInvalidConfig, i)
		}
	}
	if cfg.MaxWaiting == 0 {
		cfg.MaxWaiting = DefaultMaxWaiting
	}
	if cfg.MaxWaitingPerKey == 0 {
		cfg.MaxWaitingPerKey = DefaultMaxWaitingPerKey
	}
	return nil
}

// nextTry returns how long d, refused after waiting elapsed and deciding
// tries+1 times, waits before deciding again, and false when it must not
// wait: a refusing rate limit's RetryAfter is exact, and a wait past the
// least Wait of the refusing limits fails at once; an in-flight limit's
// RetryAfter is only an upper bound (a release may free a slot sooner),
// so while one refuses the call tries again every leasePoll (up to its
// RetryAfter and the bound), until the bound has passed.
func (in *Interceptor) nextTry(d sluice.Decision, limits []int, elapsed time.Duration, tries int) (time.Duration, bool) {
	bound := time.Duration(-1)
	var rate time.Duration
	lease := time.Duration(-1)
	for j, res := range d.Results {
		if res.Allowed {
			continue
		}
		l := in.cfg.Limits[limits[j]]
		if bound < 0 || l.Wait < bound {
			bound = l.Wait
		}
		if l.Limiter.Rule().Algorithm == driver.AlgorithmInFlight {
			lease = max(lease, res.RetryAfter)
		} else {
			rate = max(rate, res.RetryAfter)
		}
	}
	return waitDelay(rate, lease, bound-elapsed, tries)
}

// leasePoll is the first pause of a call waiting for an in-flight slot;
// each next pause doubles it, up to maxLeasePoll.
const (
	leasePoll    = 5 * time.Millisecond
	maxLeasePoll = 100 * time.Millisecond
)

// waitDelay is the pause before the next decision of a refused call with
// left of its wait bound to go, and whether it waits at all: rate is the
// longest RetryAfter of the refusing rate limits (0 for none), lease the
// longest of the refusing in-flight limits (negative for none), tries how
// many pauses came before. (httplimit's twin.)
func waitDelay(rate, lease, left time.Duration, tries int) (time.Duration, bool) {
	delay := max(rate, time.Millisecond)
	if lease >= 0 {
		poll := min(leasePoll<<min(tries, 5), maxLeasePoll, max(lease, time.Millisecond), left)
		delay = max(rate, poll)
	}
	return delay, left > 0 && delay <= left
}

// decideWaiting decides checks (limits[i] the index in Config.Limits of
// checks[i]), waiting for admission while the refusing limits allow: it
// sleeps the refusal's RetryAfter and decides again, as
// sluice.Limiter.Wait does, and returns the refusal at once when
// RetryAfter would take it past the least Wait of the refusing limits or
// the waiting places are taken. A call whose context ends while it waits
// leaves at once with its status, having taken nothing.
func (in *Interceptor) decideWaiting(ctx context.Context, checks []sluice.Check, limits []int) (sluice.Decision, error) {
	d, err := sluice.AllowAll(ctx, checks)
	if err != nil || d.Allowed || !in.waits {
		return d, err
	}
	start := time.Now()
	var keys []waitKey
	for j, res := range d.Results {
		if !res.Allowed {
			keys = append(keys, waitKey{limit: limits[j], key: checks[j].Key})
		}
	}
	entered := false
	defer func() {
		if entered {
			in.waiters.leave(keys)
		}
	}()
	for tries := 0; !d.Allowed; tries++ {
		delay, ok := in.nextTry(d, limits, time.Since(start), tries)
		if !ok {
			return d, nil
		}
		if !entered {
			if entered = in.waiters.enter(keys); !entered {
				return d, nil
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return d, status.FromContextError(ctx.Err()).Err()
		case <-t.C:
		}
		if d, err = sluice.AllowAll(ctx, checks); err != nil {
			return d, err
		}
	}
	return d, nil
}
