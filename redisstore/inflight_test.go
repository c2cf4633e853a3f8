package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/valkeytest"
)

// TestInFlightStandalone and TestInFlightCluster: see
// sluicetest.RunInFlight.
func TestInFlightStandalone(t *testing.T) {
	c, v := standalone(t)
	sluicetest.RunInFlight(t, harness(t, c, v))
}

func TestInFlightCluster(t *testing.T) {
	c, v := cluster(t)
	sluicetest.RunInFlight(t, harness(t, c, v))
}

// TestInFlightSentinel runs the in-flight tests through a Sentinel client.
func TestInFlightSentinel(t *testing.T) {
	primary := valkeytest.Start(t)
	s := valkeytest.StartSentinels(t, primary, 1, 0)
	c := client(t, &redis.UniversalOptions{Addrs: s.Addrs, MasterName: valkeytest.SentinelMaster})
	sluicetest.RunInFlight(t, harness(t, c, primary.Client(t)))
}
