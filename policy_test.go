package sluice_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
)

func TestInvalidPolicies(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, c := range []struct {
		p    sluice.Policy
		want string
	}{
		{sluice.FixedWindow{Limit: 0, Window: time.Second}, "Limit must be positive"},
		{sluice.FixedWindow{Limit: -1, Window: time.Second}, "Limit must be positive"},
		{sluice.FixedWindow{Limit: 1, Window: 0}, "at least 1ms"},
		{sluice.FixedWindow{Limit: 1, Window: 999 * time.Microsecond}, "at least 1ms"},
		{sluice.FixedWindow{Limit: 1, Window: -time.Second}, "at least 1ms"},
		{sluice.FixedWindow{Limit: 1, Window: time.Millisecond + time.Nanosecond}, "whole number of microseconds"},
		{sluice.SlidingLog{Limit: 1 << 21, Window: time.Second}, "use SlidingWindow"},
		{sluice.SlidingWindow{Limit: 1, Window: 1000 * 24 * time.Hour}, "at most"},
		{sluice.TokenBucket{Capacity: 10, Rate: nan, Per: time.Second}, "positive finite"},
		{sluice.TokenBucket{Capacity: 10, Rate: inf, Per: time.Second}, "positive finite"},
		{sluice.TokenBucket{Capacity: 10, Rate: 0, Per: time.Second}, "positive finite"},
		{sluice.TokenBucket{Capacity: 0, Rate: 1, Per: time.Second}, "Capacity must be positive"},
		{sluice.TokenBucket{Capacity: 10, Rate: 1, Per: 0}, "Per must be at least"},
		{sluice.TokenBucket{Capacity: 10, Rate: 1e7, Per: time.Second}, "more than one per microsecond"},
		{sluice.GCRA{Rate: -1, Per: time.Second, Burst: 1}, "positive finite"},
		{sluice.GCRA{Rate: 1, Per: time.Second, Burst: 0}, "Burst must be positive"},
		{sluice.GCRA{Rate: 1, Per: 24 * time.Hour, Burst: 1 << 30}, "at most"},
	} {
		_, err := sluice.New(memstore.New(), c.p)
		if !errors.Is(err, sluice.ErrInvalidPolicy) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%#v): %v; want ErrInvalidPolicy saying %q", c.p, err, c.want)
		}
	}
	ok := sluice.GCRA{Rate: 1, Per: time.Second, Burst: 1}
	for _, c := range []struct {
		opt  sluice.Option
		want string
	}{
		{sluice.WithName(""), "1 to 64"},
		{sluice.WithName("a b"), "only letters"},
		{sluice.WithName("a:b"), "only letters"},
		{sluice.WithPrefix("x{y}"), "no braces"},
		{sluice.WithTimeout(0), "timeout must be positive"},
		{sluice.WithFailMode(7), "unknown fail mode"},
	} {
		_, err := sluice.New(memstore.New(), ok, c.opt)
		if !errors.Is(err, sluice.ErrInvalidPolicy) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New with option: %v; want ErrInvalidPolicy saying %q", err, c.want)
		}
	}
	if _, err := sluice.New(nil, ok); err == nil {
		t.Error("New(nil store): no error")
	}
	if _, err := sluice.New(memstore.New(), nil); err == nil {
		t.Error("New(nil policy): no error")
	}
}

func TestParseAlgorithm(t *testing.T) {
	for _, a := range []driver.Algorithm{driver.AlgorithmFixedWindow, driver.AlgorithmSlidingLog, driver.AlgorithmSlidingWindow, driver.AlgorithmTokenBucket, driver.AlgorithmGCRA} {
		got, err := driver.ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", a, got, err)
		}
	}
	if _, err := driver.ParseAlgorithm("leaky"); !errors.Is(err, sluice.ErrInvalidPolicy) {
		t.Errorf("ParseAlgorithm(leaky): %v", err)
	}
}

func TestDefaultNamesDiffer(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range []sluice.Policy{
		sluice.FixedWindow{Limit: 5, Window: time.Second},
		sluice.SlidingLog{Limit: 5, Window: time.Second},
		sluice.SlidingLog{Limit: 5, Window: time.Second, CountRejected: true},
		sluice.SlidingWindow{Limit: 5, Window: time.Second},
		sluice.TokenBucket{Capacity: 5, Rate: 5, Per: time.Second},
		sluice.TokenBucket{Capacity: 5, Rate: 1e6, Per: time.Second},
		sluice.TokenBucket{Capacity: 5, Rate: 1, Per: 3 * time.Hour},
		sluice.GCRA{Rate: 5, Per: time.Second, Burst: 5},
		sluice.GCRA{Rate: 5, Per: time.Second, Burst: 6},
	} {
		l, err := sluice.New(memstore.New(), p)
		if err != nil {
			t.Fatal(err)
		}
		if seen[l.Name()] {
			t.Errorf("two policies share the default name %q", l.Name())
		}
		seen[l.Name()] = true
	}
}

// TestBoundsThatProtectValkey: New refuses a sliding log whose limit (and
// so a client-chosen cost) would block Valkey, and buckets whose refill
// time exceeds the longest TTL a key may have, naming the bound.
func TestBoundsThatProtectValkey(t *testing.T) {
	for _, c := range []struct {
		p    sluice.Policy
		want string
	}{
		{sluice.SlidingLog{Limit: driver.MaxSlidingLogLimit + 1, Window: time.Second}, "MaxSlidingLogLimit"},
		{sluice.SlidingLog{Limit: 1 << 20, Window: time.Second, CountRejected: true}, "MaxSlidingLogLimit"},
		{sluice.TokenBucket{Capacity: 1 << 40, Rate: 1, Per: time.Second}, "MaxWindow"},
		{sluice.TokenBucket{Capacity: 2, Rate: 1, Per: driver.MaxWindow}, "MaxWindow"},
		{sluice.GCRA{Rate: 1, Per: time.Hour, Burst: 10_000}, "MaxWindow"},
	} {
		_, err := sluice.New(memstore.New(), c.p)
		if !errors.Is(err, sluice.ErrInvalidPolicy) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%#v): %v; want ErrInvalidPolicy naming %s", c.p, err, c.want)
		}
	}
	for _, p := range []sluice.Policy{
		sluice.SlidingLog{Limit: driver.MaxSlidingLogLimit, Window: time.Second},
		sluice.TokenBucket{Capacity: 1, Rate: 1, Per: driver.MaxWindow},
		sluice.GCRA{Rate: 1, Per: time.Hour, Burst: 9600},
	} {
		l, err := sluice.New(memstore.New(), p)
		if err != nil {
			t.Errorf("New(%#v): %v", p, err)
			continue
		}
		if ttl := l.Rule().TTL(); ttl > driver.MaxWindow+driver.KeyTTLMargin {
			t.Errorf("%v: TTL %v beyond MaxWindow", l.Rule(), ttl)
		}
	}
	// A hand-built rule beyond a bound is refused by the stores too.
	r := sluice.Rule{Algorithm: driver.AlgorithmSlidingLog, Limit: 1 << 20, Window: time.Second}
	ops := []driver.Op{{Key: "k", Rule: r, Cost: 1 << 20}}
	memstore.New().Do(context.Background(), ops)
	if ops[0].Err == nil || !strings.Contains(ops[0].Err.Error(), "MaxSlidingLogLimit") {
		t.Errorf("memstore ran a rule beyond MaxSlidingLogLimit: %v", ops[0].Err)
	}
}
