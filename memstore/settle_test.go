package memstore_test

import (
	"testing"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

func TestReservations(t *testing.T) {
	sluicetest.RunReservations(t, sluicetest.Harness{Store: memstore.New()}, 300)
}

func TestReservationInput(t *testing.T) {
	sluicetest.RunReservationInput(t, sluicetest.Harness{Store: memstore.New()})
}

func TestReservationCalendar(t *testing.T) {
	sluicetest.RunReservationCalendar(t, sluicetest.Harness{Store: memstore.New()})
}

func TestReservationOverride(t *testing.T) {
	sluicetest.RunReservationOverride(t, sluicetest.Harness{Store: memstore.New()})
}
