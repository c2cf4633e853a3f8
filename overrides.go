package sluice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// Overrides per key: a limit (and optionally a window or rate) for one key
// of one limiter, until an expiry, with a reason and an actor for audit.
// They live in the store, so every process sees one at once; the store
// reads a key's override in the same atomic step as the decision (with
// valkeystore, in the same script call, from a key in the same cluster
// slot as the counter). An override never touches the key's state: its
// limit applies to what the key has already taken, and when it lapses the
// plan's or policy's limit applies again to the same state.
//
// Precedence: the key's override, then the plan the decision names, then
// the limiter's policy. Result.Source says which decided.

// Override is a limit for one key until Expires.
type Override struct {
	// Limit replaces the limit, capacity or burst. Required.
	Limit int64 `json:"limit"`
	// Window replaces the window of SlidingLog, SlidingWindow and a
	// FixedWindow of durations (not of calendar periods); zero keeps it.
	Window time.Duration `json:"window,omitempty"`
	// Rate per Per replaces the rate of TokenBucket and GCRA; zero keeps it.
	Rate float64       `json:"rate,omitempty"`
	Per  time.Duration `json:"per,omitempty"`
	// Expires is when the override lapses by itself. Required, and after
	// the time it is set. It is kept to the microsecond, as the stores
	// keep it: SetOverride truncates it.
	Expires time.Time `json:"expires"`
	// Reason and Actor say why and by whom, for audit.
	Reason string `json:"reason,omitempty"`
	Actor  string `json:"actor,omitempty"`
	// Set is when the override was set (filled in by SetOverride).
	Set time.Time `json:"set"`
}

// KeyOverride is an override and the key it is for.
type KeyOverride struct {
	Key string `json:"key"`
	Override
}

// WithOverrides makes every decision of the limiter read the key's
// override (default off: a decision then reads only the key's state). The
// store must implement driver.OverrideStore. A limiter with overrides has no deny
// cache: an override set by another process must apply at once.
func WithOverrides(on bool) Option {
	return optionFunc(func(c *config) { c.ovOn = on })
}

func (l *Limiter) overrideKey(key string) string {
	return driver.OverrideKey(l.cfg.prefix, l.cfg.name, key)
}

func (l *Limiter) overridable() error {
	if err := l.ready(); err != nil {
		return err
	}
	if l.ovs == nil {
		return badOverride("WithOverrides", "limiter %s reads no overrides (WithOverrides)", l.cfg.name)
	}
	return nil
}

// badOverride returns the *PolicyError of an override whose field (of
// Override, or "") cannot be set.
func badOverride(field, format string, args ...any) error {
	return &PolicyError{Err: ErrInvalidOverride, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// overrideFor returns the error of an override's field refused for err, a
// policy's reason: its reason under ErrInvalidOverride, once.
func overrideFor(field, prefix string, err error) error {
	return badOverride(field, "%s%s", prefix, Reason(err))
}

// withOverride returns r with o's limit, and window or rate, and the
// parameter a store keeps for it (0 when o keeps r's).
func withOverride(r Rule, o Override) (Rule, int64, error) {
	if o.Limit <= 0 {
		return Rule{}, 0, badOverride("Override.Limit", "limit must be positive, got %d", o.Limit)
	}
	var param int64
	switch {
	case o.Window != 0 && (r.Algorithm.Rated() || !r.Calendar.IsZero()):
		return Rule{}, 0, badOverride("Override.Window", "window is not for %v", r)
	case (o.Rate != 0 || o.Per != 0) && !r.Algorithm.Rated():
		return Rule{}, 0, badOverride("Override.Rate", "rate is not for %v", r)
	case o.Window != 0:
		if err := driver.CheckWindow("window", o.Window); err != nil {
			return Rule{}, 0, overrideFor("Override.Window", "", err)
		}
		param = o.Window.Microseconds()
	case o.Rate != 0 || o.Per != 0:
		iv, err := driver.CheckRate(o.Rate, o.Per)
		if err != nil {
			var pe *PolicyError
			errors.As(err, &pe)
			return Rule{}, 0, overrideFor("Override."+pe.Field, "rate: ", err)
		}
		param = iv.Microseconds()
	}
	out, err := r.Overridden(o.Limit, param)
	if err != nil {
		field := "Override.Limit"
		if param != 0 {
			field = ""
		}
		return Rule{}, 0, overrideFor(field, "", err)
	}
	return out, param, nil
}

// maxLimit is the largest limit a rule of r's algorithm may have.
func maxLimit(r Rule) int64 {
	if r.Algorithm == driver.AlgorithmSlidingLog {
		return driver.MaxSlidingLogLimit
	}
	return driver.MaxLimit
}

func (l *Limiter) now() time.Time {
	if l.cfg.clock != nil {
		return l.cfg.clock()
	}
	return time.Now()
}

// SetOverride sets key's override to o, replacing any other, until
// o.Expires. It is an error wrapping ErrInvalidOverride when o has no
// limit, has expired, or sets a window or rate the policy does not take,
// and when the limiter reads no overrides (WithOverrides).
func (l *Limiter) SetOverride(ctx context.Context, key string, o Override) error {
	if err := l.overridable(); err != nil {
		return err
	}
	if key == "" {
		return ErrInvalidKey
	}
	_, param, err := withOverride(l.rule, o)
	if err != nil {
		return err
	}
	now := l.now()
	if o.Expires.IsZero() {
		return badOverride("Override.Expires", "expires is required (an override lapses by itself)")
	}
	if err := driver.CheckTime("the limiter's clock", now); err != nil {
		return err
	}
	o.Expires = o.Expires.Truncate(time.Microsecond)
	if !o.Expires.After(now) {
		return badOverride("Override.Expires", "expires %v is not after now (%v)", o.Expires.Format(time.RFC3339), now.Format(time.RFC3339))
	}
	o.Set = now
	info, err := json.Marshal(o)
	if err != nil {
		return badOverride("", "%v", err)
	}
	rec := driver.OverrideRecord{Identity: key, Limit: o.Limit, Param: param, Expires: o.Expires, Info: string(info), Set: now}
	if err := driver.CheckRecord(rec); err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
	defer cancel()
	if err := l.ovs.PutOverride(tctx, driver.OverrideIndex(l.cfg.prefix, l.cfg.name), l.overrideKey(key), rec); err != nil {
		return fmt.Errorf("%w: set override of %s: %w", ErrStoreUnavailable, l.cfg.name, err)
	}
	return nil
}

func decodeOverride(rec driver.OverrideRecord) (Override, error) {
	var o Override
	if err := json.Unmarshal([]byte(rec.Info), &o); err != nil {
		return Override{}, fmt.Errorf("sluice: malformed override of %q: %w", rec.Identity, err)
	}
	o.Limit, o.Expires = rec.Limit, rec.Expires
	return o, nil
}

// GetOverride returns key's live override, on the limiter's clock; ok is
// false when it has none.
func (l *Limiter) GetOverride(ctx context.Context, key string) (o Override, ok bool, err error) {
	if err := l.overridable(); err != nil {
		return Override{}, false, err
	}
	if key == "" {
		return Override{}, false, ErrInvalidKey
	}
	tctx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
	defer cancel()
	rec, ok, err := l.ovs.GetOverride(tctx, l.overrideKey(key))
	if err != nil || !ok || !l.now().Before(rec.Expires) {
		return Override{}, false, err
	}
	o, err = decodeOverride(rec)
	return o, err == nil, err
}

// Overrides returns the limiter's live overrides, on the limiter's clock.
// A malformed one is left out and reported in err, after the others.
func (l *Limiter) Overrides(ctx context.Context) ([]KeyOverride, error) {
	if err := l.overridable(); err != nil {
		return nil, err
	}
	tctx, cancel := context.WithTimeout(ctx, 4*l.cfg.timeout)
	defer cancel()
	recs, err := l.ovs.ListOverrides(tctx, driver.OverrideIndex(l.cfg.prefix, l.cfg.name), l.overrideKey)
	if err != nil {
		return nil, fmt.Errorf("%w: list overrides of %s: %w", ErrStoreUnavailable, l.cfg.name, err)
	}
	out := make([]KeyOverride, 0, len(recs))
	var errs []error
	now := l.now()
	for _, rec := range recs {
		if !now.Before(rec.Expires) {
			continue
		}
		o, err := decodeOverride(rec)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, KeyOverride{Key: rec.Identity, Override: o})
	}
	return out, errors.Join(errs...)
}

// DeleteOverride removes key's override: its plan's or the policy's limit
// applies again at once.
func (l *Limiter) DeleteOverride(ctx context.Context, key string) error {
	if err := l.overridable(); err != nil {
		return err
	}
	if key == "" {
		return ErrInvalidKey
	}
	tctx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
	defer cancel()
	if err := l.ovs.DeleteOverride(tctx, driver.OverrideIndex(l.cfg.prefix, l.cfg.name), l.overrideKey(key), key); err != nil {
		return fmt.Errorf("%w: delete override of %s: %w", ErrStoreUnavailable, l.cfg.name, err)
	}
	return nil
}
