package grpclimit

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/waiting"
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

// waitKey names a limit (its index in Config.Limits) and key of a
// waiting place.
type waitKey struct {
	limit int
	key   string
}

// Waiting returns the number of calls waiting for admission now.
func (in *Interceptor) Waiting() int {
	return in.waiters.Waiting()
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
// wait (waiting.Schedule, with each refusing limit's Wait).
func (in *Interceptor) nextTry(d sluice.Decision, limits []int, elapsed time.Duration, tries int) (time.Duration, bool) {
	var s waiting.Schedule
	for j, res := range d.Results {
		if !res.Allowed {
			l := in.cfg.Limits[limits[j]]
			s.Refused(l.Wait, res.RetryAfter, l.Limiter.Rule().Algorithm)
		}
	}
	return s.Next(elapsed, tries)
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
			in.waiters.Leave(keys)
		}
	}()
	for tries := 0; !d.Allowed; tries++ {
		delay, ok := in.nextTry(d, limits, time.Since(start), tries)
		if !ok {
			return d, nil
		}
		if !entered {
			if entered = in.waiters.Enter(keys); !entered {
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
