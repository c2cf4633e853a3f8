package simulate

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
)

// TestGrantsFleet: a policy with grants is run over N simulated processes
// (real limiters WithGrants on one store, the simulated clock) beside the
// exact policy, on the same traffic: the fleet never admits more than the
// exact policy's envelope over any span of buckets (burst + rate × span),
// and, with steady demand above the limit, admits most of what the exact
// policy admits.
func TestGrantsFleet(t *testing.T) {
	cfg, err := config.Parse("g.yaml", []byte("policies:\n  - {name: hot, algorithm: gcra, burst: 100, rate: 500/s, grants: auto, grant_life: 400ms}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, procs := range []int{1, 4} {
		plan, err := NewPlan(Options{Policies: cfg.Policies, Traffic: mustTraffic(t, "poisson:3000/s"), Duration: 5 * time.Second,
			Bucket: 50 * time.Millisecond, Processes: procs, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		res, err := plan.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Policies) != 2 || res.Policies[0].Name != "hot" || res.Policies[1].Name != fleetName(cfg.Policies[0], procs) {
			t.Fatalf("policies %v", res.Policies)
		}
		exact, fleet := res.Policies[0], res.Policies[1]
		if fleet.Requests != exact.Requests || fleet.Requests < 10000 {
			t.Fatalf("requests: fleet %d, exact %d", fleet.Requests, exact.Requests)
		}
		b := res.Bucket.Seconds()
		for i := range fleet.Buckets {
			var sum int64
			for j := i; j < len(fleet.Buckets); j++ {
				sum += fleet.Buckets[j].AllowedUnits
				if limit := 100 + 500*b*float64(j-i+1); float64(sum) > limit {
					t.Fatalf("%d processes: buckets %d..%d admitted %d, over the exact envelope %.0f", procs, i, j, sum, limit)
				}
			}
		}
		t.Logf("%d processes: the fleet admitted %d, the exact policy %d, of %d requests", procs, fleet.Allowed, exact.Allowed, fleet.Requests)
		if fleet.Allowed > exact.Allowed+100 || float64(fleet.Allowed) < 0.8*float64(exact.Allowed) {
			t.Errorf("%d processes: the fleet admitted %d, the exact policy %d", procs, fleet.Allowed, exact.Allowed)
		}
	}
}

// TestGrantsProcessesBound: --processes is bounded.
func TestGrantsProcessesBound(t *testing.T) {
	cfg, err := config.Parse("g.yaml", []byte("policies:\n  - {name: hot, algorithm: gcra, burst: 100, rate: 500/s, grants: auto}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewPlan(Options{Policies: cfg.Policies, Traffic: mustTraffic(t, "steady:10/s"), Processes: maxProcesses + 1}); err == nil {
		t.Fatal("accepted")
	}
}
