package valkeytest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/valkey-io/valkey-go"
)

// What TTLs reports for a key without a time to live, and for a key that
// is gone (expired or deleted between the scan and the PTTL). They are
// PTTL's own -1 and -2, not milliseconds.
const (
	NoExpiry time.Duration = -1
	Gone     time.Duration = -2
)

// Keys returns, sorted, every key matching pattern (SCAN ... MATCH pattern)
// on every primary that c is connected to: the server of a standalone
// client, or every primary of a cluster client (c.Nodes(); replicas are
// skipped).
func Keys(ctx context.Context, c valkey.Client, pattern string) ([]string, error) {
	seen := make(map[string]struct{})
	for addr, node := range c.Nodes() {
		if c.Mode() == valkey.ClientModeCluster {
			role, err := node.Do(ctx, node.B().Role().Build()).ToArray()
			if err != nil {
				return nil, fmt.Errorf("ROLE on %s: %w", addr, err)
			}
			if len(role) == 0 {
				return nil, fmt.Errorf("ROLE on %s: empty reply", addr)
			}
			if r, _ := role[0].ToString(); r != "master" {
				continue
			}
		}
		var cursor uint64
		for {
			e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
			if err != nil {
				return nil, fmt.Errorf("SCAN on %s: %w", addr, err)
			}
			for _, k := range e.Elements {
				seen[k] = struct{}{}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// TTLs returns the time to live (PTTL) of every key Keys finds: a positive
// duration to millisecond precision, NoExpiry (-1) for a key that never
// expires, Gone (-2) for a key that vanished since the scan.
func TTLs(ctx context.Context, c valkey.Client, pattern string) (map[string]time.Duration, error) {
	keys, err := Keys(ctx, c, pattern)
	if err != nil {
		return nil, err
	}
	out := make(map[string]time.Duration, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	cmds := make(valkey.Commands, len(keys))
	for i, k := range keys {
		cmds[i] = c.B().Pttl().Key(k).Build()
	}
	for i, r := range c.DoMulti(ctx, cmds...) {
		ms, err := r.AsInt64()
		if err != nil {
			return nil, fmt.Errorf("PTTL %s: %w", keys[i], err)
		}
		switch {
		case ms == -1:
			out[keys[i]] = NoExpiry
		case ms < 0:
			out[keys[i]] = Gone
		default:
			out[keys[i]] = time.Duration(ms) * time.Millisecond
		}
	}
	return out, nil
}
