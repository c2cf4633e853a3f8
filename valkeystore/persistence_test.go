package valkeystore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
)

// TestQuotaSurvivesRestart measures what a daily quota loses when Valkey is
// killed (SIGKILL, as a crash or an OOM kill) and restarted, under three
// persistence settings: none (the counts are gone: every key starts again
// with its whole quota), appendonly with appendfsync everysec (up to about
// a second of writes lost) and appendonly with appendfsync always (nothing
// lost). docs/production.md, "Persistence", states what it checks.
func TestQuotaSurvivesRestart(t *testing.T) {
	const taken = 2000
	for _, tc := range []struct {
		name string
		args []string
		// lost is checked exactly where the setting promises it.
		check func(lost int64) bool
	}{
		{"no persistence", nil, func(lost int64) bool { return lost == taken }},
		{"appendonly everysec", []string{"--appendonly", "yes", "--appendfsync", "everysec"}, func(lost int64) bool { return lost >= 0 && lost <= taken }},
		{"appendonly always", []string{"--appendonly", "yes", "--appendfsync", "always"}, func(lost int64) bool { return lost == 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := valkeytest.Start(t, tc.args...)
			c := srv.Client(t)
			st, err := valkeystore.New(c, valkeystore.WithoutBreaker())
			if err != nil {
				t.Fatal(err)
			}
			la, err := time.LoadLocation("America/Los_Angeles")
			if err != nil {
				t.Fatal(err)
			}
			l, err := sluice.New(st, sluice.FixedWindow{Limit: 1_000_000, Calendar: sluice.Calendar{Unit: sluice.Day, Zone: la}},
				sluice.WithTimeout(5*time.Second), sluice.WithDenyCache(false))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for range taken {
				if res, err := l.Allow(ctx, "acme"); err != nil || !res.Allowed || res.Degraded {
					t.Fatalf("%+v %v", res, err)
				}
			}
			srv.Kill(t)
			srv.Restart(t)
			var res sluice.Result
			deadline := time.Now().Add(10 * time.Second)
			for {
				res, err = l.Peek(ctx, "acme")
				if err == nil && !res.Degraded || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if err != nil || res.Degraded {
				t.Fatalf("after restart: %+v %v", res, err)
			}
			lost := taken - (res.Limit - res.Remaining)
			t.Logf("%s: %d of %d units taken were lost by a kill and restart", tc.name, lost, taken)
			if !tc.check(lost) {
				t.Errorf("%s: %d of %d lost", tc.name, lost, taken)
			}
		})
	}
}
