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
		primary, err := isPrimary(ctx, c, addr, node)
		if err != nil {
			return nil, err
		}
		if !primary {
			continue
		}
		if err := scanNode(ctx, addr, node, pattern, seen); err != nil {
			return nil, err
		}
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// isPrimary reports whether node, at addr, is a primary: always for a
// standalone client, by ROLE for a cluster client.
func isPrimary(ctx context.Context, c valkey.Client, addr string, node valkey.Client) (bool, error) {
	if c.Mode() != valkey.ClientModeCluster {
		return true, nil
	}
	role, err := node.Do(ctx, node.B().Role().Build()).ToArray()
	if err != nil {
		return false, fmt.Errorf("ROLE on %s: %w", addr, err)
	}
	if len(role) == 0 {
		return false, fmt.Errorf("ROLE on %s: empty reply", addr)
	}
	r, _ := role[0].ToString()
	return r == "master", nil
}

// scanNode adds to seen every key of node, at addr, that matches pattern.
func scanNode(ctx context.Context, addr string, node valkey.Client, pattern string, seen map[string]struct{}) error {
	var cursor uint64
	for {
		e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return fmt.Errorf("SCAN on %s: %w", addr, err)
		}
		for _, k := range e.Elements {
			seen[k] = struct{}{}
		}
		if cursor = e.Cursor; cursor == 0 {
			return nil
		}
	}
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
		out[keys[i]] = ttlOf(ms)
	}
	return out, nil
}

// ttlOf is the time to live PTTL answered as ms: NoExpiry, Gone or a
// duration.
func ttlOf(ms int64) time.Duration {
	switch {
	case ms == -1:
		return NoExpiry
	case ms < 0:
		return Gone
	}
	return time.Duration(ms) * time.Millisecond
}
