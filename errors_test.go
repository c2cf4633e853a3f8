package sluice_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// TestErrorsSayTheirPrefixOnce: an error of the library begins with one
// "sluice: " and its kind, whatever reason it carries: an override refused
// for a policy's reason reads "sluice: invalid override: <reason>", not
// "sluice: invalid override: sluice: invalid policy: <reason>"; Reason
// gives the reason alone, and errors.Is the kind.
func TestErrorsSayTheirPrefixOnce(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	cal := sluice.FixedWindow{Limit: 5, Calendar: sluice.Calendar{Unit: sluice.Day, Zone: time.UTC}}
	for _, tc := range []struct {
		policy sluice.Policy
		o      sluice.Override
		reason string
	}{
		{sluice.SlidingWindow{Limit: 5, Window: time.Minute}, sluice.Override{Limit: 3, Window: time.Nanosecond}, "window must be at least 1ms, got 1ns"},
		{sluice.TokenBucket{Capacity: 5, Rate: 1, Per: time.Second}, sluice.Override{Limit: 3, Rate: 1e9, Per: time.Second}, "rate: Rate 1e+09 per 1s is more than one per microsecond"},
		{sluice.TokenBucket{Capacity: 5, Rate: 1, Per: time.Second}, sluice.Override{Limit: 1e6, Rate: 1, Per: time.Hour}, "must be at most MaxWindow"},
		{cal, sluice.Override{Limit: 3, Window: time.Minute}, "window is not for"},
		{sluice.SlidingLog{Limit: 5, Window: time.Minute}, sluice.Override{Limit: 5000}, "SlidingLog Limit must be at most 1000"},
	} {
		l, err := sluice.New(memstore.New(), tc.policy, sluice.WithOverrides(true), sluice.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		tc.o.Expires = now.Add(time.Hour)
		err = l.SetOverride(ctx, "k", tc.o)
		if !errors.Is(err, sluice.ErrInvalidOverride) {
			t.Fatalf("%+v: %v, want ErrInvalidOverride", tc.o, err)
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "sluice: invalid override: ") || strings.Count(msg, "sluice:") != 1 || strings.Contains(msg, "invalid policy") {
			t.Errorf("%+v: %q, want one prefix", tc.o, msg)
		}
		if r := sluice.Reason(err); !strings.Contains(r, tc.reason) || strings.Contains(r, "sluice:") || "sluice: invalid override: "+r != msg {
			t.Errorf("%+v: Reason %q, want %q without the prefix", tc.o, r, tc.reason)
		}
	}
	for _, p := range []sluice.Policy{
		sluice.FixedWindow{Limit: 0, Window: time.Second},
		sluice.GCRA{Rate: 5, Per: time.Nanosecond, Burst: 1},
	} {
		_, err := sluice.New(memstore.New(), p)
		var pe *sluice.PolicyError
		if !errors.Is(err, sluice.ErrInvalidPolicy) || !errors.As(err, &pe) || strings.Count(err.Error(), "sluice:") != 1 {
			t.Errorf("New(%+v): %v, want one *PolicyError", p, err)
		}
	}
	if _, err := sluice.New(memstore.New(), sluice.FixedWindow{Limit: 1, Window: time.Second}, sluice.WithName(strings.Repeat("n", sluice.MaxNameLength+1))); sluice.Reason(err) != "name must be 1 to 64 characters, got 65" {
		t.Errorf("a long name: %v", err)
	}
}

// TestPolicyErrorFields: every refusal of a policy, option, override or
// cost is a *PolicyError naming the field as the Go API spells it, whose
// text says the kind's prefix once, at its start, and then its reason.
func TestPolicyErrorFields(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	store := memstore.New()
	mk := func(p sluice.Policy, opts ...sluice.Option) *sluice.Limiter {
		l, err := sluice.New(store, p, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	sw := mk(sluice.SlidingWindow{Limit: 5, Window: time.Minute}, sluice.WithName("sw"), sluice.WithOverrides(true), sluice.WithClock(clock))
	fw := mk(sluice.FixedWindow{Limit: 5, Window: time.Minute}, sluice.WithName("fw"))
	newErr := func(p sluice.Policy, opts ...sluice.Option) error {
		_, err := sluice.New(store, p, opts...)
		return err
	}
	for _, tc := range []struct {
		err    error
		kind   error
		field  string
		reason string
	}{
		{newErr(sluice.FixedWindow{Limit: 0, Window: time.Second}), sluice.ErrInvalidPolicy, "FixedWindow.Limit", "FixedWindow.Limit must be positive, got 0"},
		{newErr(sluice.SlidingWindow{Limit: 1, Window: time.Nanosecond}), sluice.ErrInvalidPolicy, "SlidingWindow.Window", "SlidingWindow.Window must be at least 1ms, got 1ns"},
		{newErr(sluice.TokenBucket{Capacity: 1, Rate: 0, Per: time.Second}), sluice.ErrInvalidPolicy, "TokenBucket.Rate", "TokenBucket: Rate must be a positive finite number, got 0"},
		{newErr(sluice.GCRA{Burst: 1, Rate: 1, Per: 0}), sluice.ErrInvalidPolicy, "GCRA.Per", "GCRA: Per must be at least 1ms, got 0s"},
		{newErr(sluice.FixedWindow{Limit: 1, Calendar: sluice.Calendar{Unit: sluice.Day}}), sluice.ErrInvalidPolicy, "Calendar.Zone", "Calendar.Zone must be set"},
		{newErr(sluice.FixedWindow{Limit: 1, Window: time.Second}, sluice.WithName("a b")), sluice.ErrInvalidPolicy, "WithName", `name "a b" may hold only`},
		{newErr(sluice.FixedWindow{Limit: 1, Window: time.Second}, sluice.WithTimeout(0)), sluice.ErrInvalidPolicy, "WithTimeout", "timeout must be positive, got 0s"},
		{sw.SetOverride(ctx, "k", sluice.Override{Limit: 0, Expires: now.Add(time.Hour)}), sluice.ErrInvalidOverride, "Override.Limit", "limit must be positive, got 0"},
		{sw.SetOverride(ctx, "k", sluice.Override{Limit: 1, Rate: 1, Per: time.Second, Expires: now.Add(time.Hour)}), sluice.ErrInvalidOverride, "Override.Rate", "rate is not for"},
		{sw.SetOverride(ctx, "k", sluice.Override{Limit: 1}), sluice.ErrInvalidOverride, "Override.Expires", "expires is required"},
		{fw.SetOverride(ctx, "k", sluice.Override{Limit: 1, Expires: now.Add(time.Hour)}), sluice.ErrInvalidOverride, "WithOverrides", "limiter fw reads no overrides"},
		{func() error { _, err := fw.AllowN(ctx, "k", 6); return err }(), sluice.ErrInvalidCost, "Cost", "cost 6 exceeds the limit 5 of fw"},
		{func() error { _, err := fw.AllowN(ctx, "k", -1); return err }(), sluice.ErrInvalidCost, "Cost", "cost -1 is negative"},
		{func() error {
			_, err := sluice.AllowEach(ctx, []sluice.Check{{Limiter: fw, Key: "k", Cost: 1}, {Limiter: sw, Key: "k", Cost: -1}})
			return err
		}(), sluice.ErrInvalidCost, "Check.Cost", "check 1: a give-back without a take is only for fixed_window, not sliding_window"},
		{func() error { _, err := sluice.AllowAll(ctx, []sluice.Check{{Key: "k", Cost: 1}}); return err }(), sluice.ErrInvalidPolicy, "Check.Limiter", "check 0 has no limiter"},
	} {
		var pe *sluice.PolicyError
		if !errors.Is(tc.err, tc.kind) || !errors.As(tc.err, &pe) {
			t.Errorf("%v: want a *PolicyError wrapping %v", tc.err, tc.kind)
			continue
		}
		if pe.Field != tc.field || !strings.HasPrefix(pe.Reason, tc.reason) {
			t.Errorf("%v: Field %q, Reason %q; want %q, %q...", tc.err, pe.Field, pe.Reason, tc.field, tc.reason)
		}
		if msg := tc.err.Error(); msg != tc.kind.Error()+": "+pe.Reason || strings.Count(msg, "sluice:") != 1 {
			t.Errorf("%q: want %q, the prefix once, then the reason", msg, tc.kind.Error()+": "+pe.Reason)
		}
	}
	// An unknown plan in a check says its prefix once, at the start.
	_, err := sluice.AllowAll(ctx, []sluice.Check{{Limiter: fw, Key: "k", Cost: 1, Plan: "gold"}})
	if !errors.Is(err, sluice.ErrUnknownPlan) || err.Error() != `sluice: invalid policy: unknown plan "gold" of fw (check 0)` {
		t.Errorf("unknown plan in a check: %v", err)
	}
}
