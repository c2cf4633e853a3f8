package doctor

import (
	"slices"
	"testing"
)

// TestPrimariesWithoutReplica: from CLUSTER NODES, the primaries that
// serve slots and have no replica up; a failed replica does not count, a
// primary without slots is no primary here.
func TestPrimariesWithoutReplica(t *testing.T) {
	nodes := `a1 10.0.0.1:6379@16379 myself,master - 0 0 1 connected 0-5460
a2 10.0.0.2:6379@16379 master - 0 0 2 connected 5461-10922
a3 10.0.0.3:6379@16379 master - 0 0 3 connected 10923-16383
r1 10.0.0.4:6379@16379 slave a1 0 0 1 connected
r2 10.0.0.5:6379@16379 slave,fail a2 0 0 2 connected
e1 10.0.0.6:6379@16379 master - 0 0 4 connected
`
	lonely, prims := primariesWithoutReplica(nodes)
	if prims != 3 || !slices.Equal(lonely, []string{"10.0.0.2:6379", "10.0.0.3:6379"}) {
		t.Errorf("got %v of %d primaries, want 10.0.0.2:6379 and 10.0.0.3:6379 of 3", lonely, prims)
	}
	if lonely, prims := primariesWithoutReplica(""); prims != 0 || lonely != nil {
		t.Errorf("no nodes: %v %d", lonely, prims)
	}
}
