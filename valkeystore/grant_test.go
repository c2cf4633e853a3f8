package valkeystore_test

import (
	"testing"

	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/valkeytest"
)

// TestGrantTwins: grant.lua answers as memstore's twin on random
// timelines, standalone and on a cluster.
func TestGrantTwins(t *testing.T) {
	sluicetest.RunGrantTwins(t, newStore(t, valkeytest.Shared(t).Client(t)), 20)
}

func TestGrantTwinsCluster(t *testing.T) {
	sluicetest.RunGrantTwins(t, newStore(t, valkeytest.SharedCluster(t).Client(t)), 8)
}

func TestGrantInputValkey(t *testing.T) {
	sluicetest.RunGrantInput(t, newStore(t, valkeytest.Shared(t).Client(t)))
}

// TestGrantTwinsSentinel: through Sentinel, the same timelines and the
// same bad input.
func TestGrantTwinsSentinel(t *testing.T) {
	primary := valkeytest.Start(t)
	ss := valkeytest.StartSentinels(t, primary, 1, 0)
	st := newStore(t, ss.Client(t))
	sluicetest.RunGrantTwins(t, st, 4)
	sluicetest.RunGrantInput(t, st)
}
