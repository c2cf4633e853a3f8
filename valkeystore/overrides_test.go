package valkeystore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/valkeytest"
)

// TestMalformedOverride: an override key that the script cannot use (bad
// numbers, out of bounds, not a hash) never fails a decision: the policy
// decides, and the Result reports the override as invalid.
func TestMalformedOverride(t *testing.T) {
	c := valkeytest.Shared(t).Client(t)
	s := newStore(t, c)
	ctx := context.Background()
	prefix := sluicetest.Prefix(t)
	l, err := sluice.New(s, sluice.GCRA{Rate: 10, Per: time.Second, Burst: 3}, sluice.WithPrefix(prefix), sluice.WithOverrides(true), sluice.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	far := time.Now().Add(time.Hour).UnixMicro()
	for i, fields := range [][]string{
		{"limit", "x", "param", "0", "until", itoa(far)},
		{"limit", "5", "param", "0", "until", "soon"},
		{"limit", "0", "param", "0", "until", itoa(far)},
		{"limit", "5.5", "param", "0", "until", itoa(far)},
		{"limit", "1099511627777", "param", "0", "until", itoa(far)},
		{"limit", "5", "param", "-1", "until", itoa(far)},
		{"limit", "1000000", "param", "100000000", "until", itoa(far)}, // refill beyond MaxWindow
		{"limit", "5"},
		{"string"},
	} {
		key := sluice.Identity("m", itoa(int64(i)))
		ok := driver.OverrideKey(prefix, l.Name(), key)
		if fields[0] == "string" {
			c.Do(ctx, c.B().Set().Key(ok).Value("x").Build())
		} else {
			c.Do(ctx, c.B().Hset().Key(ok).FieldValue().FieldValue(fields[0], fields[1]).Build())
			for j := 2; j+1 < len(fields); j += 2 {
				c.Do(ctx, c.B().Hset().Key(ok).FieldValue().FieldValue(fields[j], fields[j+1]).Build())
			}
		}
		res, err := l.Allow(ctx, key)
		if err != nil || !res.Allowed || res.Degraded || !res.OverrideInvalid || res.Source != sluice.SourcePolicy || res.Limit != 3 || res.Remaining != 2 {
			t.Errorf("malformed override %v: %+v %v, want the policy's decision with OverrideInvalid", fields, res, err)
		}
		c.Do(ctx, c.B().Del().Key(ok).Build())
	}
	// A well-formed one applies.
	key := "good"
	c.Do(ctx, c.B().Hset().Key(driver.OverrideKey(prefix, l.Name(), key)).FieldValue().FieldValue("limit", "7").FieldValue("param", "0").FieldValue("until", itoa(far)).Build())
	res, err := l.Allow(ctx, key)
	if err != nil || res.Source != sluice.SourceOverride || res.Limit != 7 || res.Remaining != 6 || res.OverrideInvalid {
		t.Errorf("well-formed override: %+v %v", res, err)
	}
	c.Do(ctx, c.B().Del().Key(driver.OverrideKey(prefix, l.Name(), key)).Build())
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// TestDifferentialOverrides: see sluicetest.RunDifferentialOverrides.
func TestDifferentialOverrides(t *testing.T) {
	sluicetest.RunDifferentialOverrides(t, harness(t, valkeytest.Shared(t).Client(t)))
}

// BenchmarkOverrides measures what reading key overrides costs a decision:
// a fixed window on 100k keys, 128 goroutines, without overrides, with
// overrides on and none set, and with one set on every key.
//
//	go test -run '^$' -bench Overrides -benchtime 2s ./valkeystore
func BenchmarkOverrides(b *testing.B) {
	srv := valkeytest.Start(b)
	c := srv.Client(b)
	s := newStore(b, c)
	ctx := context.Background()
	const n = 100_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	policy := sluice.FixedWindow{Limit: 1 << 30, Window: time.Hour}
	for _, mode := range []string{"off", "on-none-set", "on-all-set"} {
		opts := []sluice.Option{sluice.WithTimeout(10 * time.Second), sluice.WithDenyCache(false), sluice.WithName("bench-" + mode)}
		if mode != "off" {
			opts = append(opts, sluice.WithOverrides(true))
		}
		l, err := sluice.New(s, policy, opts...)
		if err != nil {
			b.Fatal(err)
		}
		if mode == "on-all-set" {
			for _, k := range keys {
				if err := l.SetOverride(ctx, k, sluice.Override{Limit: 1 << 31, Expires: time.Now().Add(time.Hour)}); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.Run(mode, func(b *testing.B) {
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(64)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					res, err := l.Allow(ctx, keys[next.Add(1)%n])
					if err != nil || res.Degraded || !res.Allowed || (mode == "on-all-set") != (res.Source == sluice.SourceOverride) {
						b.Errorf("%+v %v", res, err)
						return
					}
				}
			})
		})
	}
}
