package luascript

import (
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// StateFields names the integers a key of r holds, in the order the
// scripts pack them into its one string (struct '<i8...': each a
// little-endian int64; see readPacked in prelude.lua), or nil when r's
// state is not packed: a sliding log keeps a sorted set, a GCRA its TAT as
// a decimal string.
func StateFields(r *sluice.Rule) []string {
	switch r.Algorithm {
	case driver.AlgorithmFixedWindow:
		return []string{"w", "c"} // window (its number, or a calendar period's first instant), count
	case driver.AlgorithmSlidingWindow:
		return []string{"w", "c", "p"} // window number, its count, the previous window's
	case driver.AlgorithmTokenBucket:
		return []string{"u", "ts"} // microseconds of credit, their time
	}
	return nil
}

// DecodeState returns the integers of the packed state v of a key of r, by
// their names in StateFields, in decimal: what sluice inspect shows.
func DecodeState(r *sluice.Rule, v string) (map[string]string, error) {
	names := StateFields(r)
	if names == nil {
		return nil, fmt.Errorf("the state of %v is not packed", r)
	}
	if len(v) != 8*len(names) {
		return nil, fmt.Errorf("the state of %v is %d bytes, want %d", r, len(v), 8*len(names))
	}
	m := make(map[string]string, len(names))
	for i, n := range names {
		m[n] = strconv.FormatInt(int64At(v, 8*i), 10)
	}
	return m, nil
}

// PenaltyState is the state a penalty key holds (penalty.lua): the open
// window of refusals (its start and count; 0 and 0 for none), the end of
// the last block and the level, the number of blocks in a row. Times are
// microseconds since the Unix epoch.
type PenaltyState struct {
	WindowStart, Count, Until, Level int64
}

// DecodePenalty returns the state packed in v, the string under a penalty
// key (driver.PenaltyKey): what sluice inspect shows.
func DecodePenalty(v string) (PenaltyState, error) {
	if len(v) != 4*8 {
		return PenaltyState{}, fmt.Errorf("a penalty's state is %d bytes, want 32", len(v))
	}
	return PenaltyState{WindowStart: int64At(v, 0), Count: int64At(v, 8), Until: int64At(v, 16), Level: int64At(v, 24)}, nil
}
