package valkeystore_test

import (
	"testing"

	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/valkeytest"
)

// TestInFlightStandalone and TestInFlightCluster: see
// sluicetest.RunInFlight (on a cluster, the timelines' batches span slots
// of several nodes, and of one node: cross-slot calls).
func TestInFlightStandalone(t *testing.T) {
	sluicetest.RunInFlight(t, harness(t, valkeytest.Shared(t).Client(t)))
}

func TestInFlightCluster(t *testing.T) {
	sluicetest.RunInFlight(t, harness(t, valkeytest.SharedCluster(t).Client(t)))
}

// TestInFlightSentinel runs the in-flight tests through a Sentinel client.
func TestInFlightSentinel(t *testing.T) {
	primary := valkeytest.Start(t)
	ss := valkeytest.StartSentinels(t, primary, 1, 0)
	sluicetest.RunInFlight(t, harness(t, ss.Client(t)))
}
