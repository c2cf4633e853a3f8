package memstore_test

import (
	"testing"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

func TestGrantInput(t *testing.T) { sluicetest.RunGrantInput(t, memstore.New()) }
