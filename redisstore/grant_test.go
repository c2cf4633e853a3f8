package redisstore_test

import (
	"testing"

	"github.com/sluicehq/sluice/sluicetest"
)

// TestGrantTwins: grant calls through go-redis answer as memstore's twin,
// standalone and on a cluster; bad input is refused.
func TestGrantTwins(t *testing.T) {
	c, _ := standalone(t)
	st := newStore(t, c)
	sluicetest.RunGrantTwins(t, st, 10)
	sluicetest.RunGrantInput(t, st)
}

func TestGrantTwinsCluster(t *testing.T) {
	c, _ := cluster(t)
	sluicetest.RunGrantTwins(t, newStore(t, c), 4)
}
