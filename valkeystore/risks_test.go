package valkeystore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
)

// TestRisks: Store.Risks names an evicting maxmemory-policy (only when
// maxmemory is set) and cluster-require-full-coverage yes, and says so
// when CONFIG cannot be read.
func TestRisks(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		args []string
		want []string // settings
	}{
		{"noeviction", []string{"--maxmemory", "100mb", "--maxmemory-policy", "noeviction"}, nil},
		{"allkeys-lru", []string{"--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"}, []string{"maxmemory-policy"}},
		{"volatile-ttl", []string{"--maxmemory", "100mb", "--maxmemory-policy", "volatile-ttl"}, []string{"maxmemory-policy"}},
		{"no-maxmemory", []string{"--maxmemory", "0", "--maxmemory-policy", "allkeys-lru"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := valkeystore.New(valkeytest.Start(t, tc.args...).Client(t))
			if err != nil {
				t.Fatal(err)
			}
			risks, err := s.Risks(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range risks {
				got = append(got, r.Setting)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("risks %v, want settings %v", risks, tc.want)
			}
		})
	}
	t.Run("config-disabled", func(t *testing.T) {
		s, err := valkeystore.New(valkeytest.Start(t, "--rename-command", "CONFIG", "").Client(t))
		if err != nil {
			t.Fatal(err)
		}
		risks, err := s.Risks(ctx)
		if err == nil || len(risks) != 0 || !strings.Contains(err.Error(), "cannot read the settings") {
			t.Errorf("risks %v, err %v; want none and an error saying the settings cannot be read", risks, err)
		}
		t.Logf("CONFIG disabled: %v", err)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := valkeytest.SharedCluster(t)
		s, err := valkeystore.New(cl.Client(t))
		if err != nil {
			t.Fatal(err)
		}
		risks, err := s.Risks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		nodes := map[string]bool{}
		for _, r := range risks {
			if r.Setting == "cluster-require-full-coverage" {
				nodes[r.Node] = true
			}
		}
		if len(nodes) != len(cl.Primaries) {
			t.Errorf("risks %v; want cluster-require-full-coverage on each of %v", risks, cl.Addrs)
		}
	})
}

// TestEvictionLoss measures what an evicting maxmemory-policy costs: a
// limit of 5 per hour on one key, on a server that evicts (allkeys-random;
// volatile-ttl, with other data that lives longer) while other data fills
// it. (Under an LRU or LFU policy a key in steady use is evicted last; a
// user who pauses is not.) Each eviction of the limiter's
// key gives the key its full limit again, so more than 5 requests get
// through: the loss has no bound but the number of evictions.
func TestEvictionLoss(t *testing.T) {
	for _, policy := range []string{"allkeys-random", "volatile-ttl"} {
		t.Run(policy, func(t *testing.T) {
			srv := valkeytest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", policy, "--maxmemory-samples", "3")
			c := srv.Client(t)
			s, err := valkeystore.New(c)
			if err != nil {
				t.Fatal(err)
			}
			l, err := sluice.New(s, sluice.FixedWindow{Limit: 5, Window: time.Hour}, sluice.WithName("evicted"),
				sluice.WithTimeout(time.Second), sluice.WithLogger(discardLogger),
				// The deny cache would hide the loss from this one process
				// until the refusal's RetryAfter; other processes have none.
				sluice.WithDenyCache(false))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			filler := strings.Repeat("x", 16<<10)
			allowed, rounds := 0, 200
			for i := range rounds {
				res, err := l.Allow(ctx, "victim")
				if err != nil || res.Degraded {
					t.Fatalf("%+v, %v", res, err)
				}
				if res.Allowed {
					allowed++
				}
				// Other data, with a time to live longer than the
				// limiter's key (volatile-* policies may pick either).
				for j := range 16 {
					if err := c.Do(ctx, c.B().Set().Key(fmt.Sprintf("filler:%d:%d", i, j)).Value(filler).ExSeconds(7200).Build()).Error(); err != nil {
						t.Fatal(err)
					}
				}
			}
			info, _ := c.Do(ctx, c.B().Info().Section("stats").Build()).ToString()
			evicted := ""
			for _, line := range strings.Split(info, "\r\n") {
				if v, ok := strings.CutPrefix(line, "evicted_keys:"); ok {
					evicted = v
				}
			}
			t.Logf("%s: %d of %d requests allowed on a limit of 5 per hour; %s keys evicted", policy, allowed, rounds, evicted)
			if allowed <= 5 {
				t.Errorf("%d allowed: no count was lost to eviction; is the server evicting?", allowed)
			}
		})
	}
}
