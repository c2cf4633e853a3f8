package valkeystore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// ValkeystoreSkew decides ops with calendar bounds computed as if this
// host's clock were skew ahead of the server's, and returns the first Op's
// error.
func ValkeystoreSkew(t testing.TB, s *Store, ops []sluice.Op, skew time.Duration) error {
	t.Helper()
	clockSkew = skew
	defer func() { clockSkew = 0 }()
	if err := s.Do(context.Background(), ops); err != nil {
		return err
	}
	return ops[0].Err
}

// CrossSplits returns how many cross calls (keys of several slots of one
// node) were split after a refusal that proved they did not run.
func CrossSplits() int64 { return crossSplits.Load() }

// CrossCalls returns how many cross calls were sent.
func CrossCalls() int64 { return crossCalls.Load() }
