package redisstore_test

import (
	"testing"

	"github.com/sluicehq/sluice/sluicetest"
)

// TestReservations: random timelines of reservations through go-redis
// agree with the reference model, standalone and on a cluster; bad input
// is refused. (redisstore keeps no overrides: RunReservationOverride does
// not apply.)
func TestReservations(t *testing.T) {
	c, _ := standalone(t)
	h := sluicetest.Harness{Store: newStore(t, c)}
	sluicetest.RunReservations(t, h, 40)
	sluicetest.RunReservationInput(t, h)
	sluicetest.RunReservationCalendar(t, h)
}

func TestReservationsCluster(t *testing.T) {
	c, _ := cluster(t)
	sluicetest.RunReservations(t, sluicetest.Harness{Store: newStore(t, c)}, 20)
}
