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
