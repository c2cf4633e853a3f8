// Package valkeyops holds what Sluice's operator commands (verify, doctor,
// keys, inspect, reset) do to a Valkey besides deciding: name it, find the
// primaries of a cluster, and walk keys with SCAN (never KEYS, which blocks
// the server). Package store connects to it.
package valkeyops

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/valkey-io/valkey-go"
)

// ErrNoValkey is returned when neither the configuration nor the command
// line names a Valkey.
var ErrNoValkey = errors.New("no Valkey configured: add a valkey section with addresses (or sentinel) to the configuration, or pass --valkey host:port")

// Configured reports whether v names a Valkey: addresses, or Sentinels.
func Configured(v *config.Valkey) bool {
	return v != nil && (len(v.Addresses) > 0 || v.Sentinel != nil)
}

// Describe names the Valkey of v for messages: its addresses, or the
// master set and its Sentinels.
func Describe(v *config.Valkey) string {
	if v == nil {
		return "(none)"
	}
	if v.Sentinel != nil {
		return fmt.Sprintf("master %s via Sentinels %s", v.Sentinel.MasterSet, strings.Join(v.Sentinel.Addresses, ","))
	}
	return strings.Join(v.Addresses, ",")
}

// Primaries returns the client of every primary that c knows, by address:
// the one server of a standalone client, the primaries of a cluster client
// (replicas are left out, by ROLE).
func Primaries(ctx context.Context, c valkey.Client) (map[string]valkey.Client, error) {
	nodes := c.Nodes()
	if c.Mode() != valkey.ClientModeCluster {
		return nodes, nil
	}
	out := make(map[string]valkey.Client, len(nodes))
	for addr, node := range nodes {
		primary, err := isPrimary(ctx, addr, node)
		if err != nil {
			return nil, err
		}
		if primary {
			out[addr] = node
		}
	}
	return out, nil
}

// isPrimary reports whether node, at addr, says by ROLE it is a primary.
func isPrimary(ctx context.Context, addr string, node valkey.Client) (bool, error) {
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

// SortedAddrs returns the keys of nodes, sorted.
func SortedAddrs(nodes map[string]valkey.Client) []string {
	return slices.Sorted(maps.Keys(nodes))
}

// Scan calls fn with every key matching pattern on every primary, a batch
// of keys at a time, walking each node with SCAN ... MATCH ... COUNT 1000.
// It stops when fn returns an error, or false for more.
func Scan(ctx context.Context, c valkey.Client, pattern string, fn func(node valkey.Client, keys []string) (more bool, err error)) error {
	prims, err := Primaries(ctx, c)
	if err != nil {
		return err
	}
	for _, addr := range SortedAddrs(prims) {
		more, err := scanNode(ctx, addr, prims[addr], pattern, fn)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// scanNode calls fn with every key matching pattern on node, at addr, a
// batch at a time; more is false when fn asked to stop.
func scanNode(ctx context.Context, addr string, node valkey.Client, pattern string, fn func(node valkey.Client, keys []string) (more bool, err error)) (more bool, err error) {
	var cursor uint64
	for {
		e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return false, fmt.Errorf("SCAN on %s: %w", addr, err)
		}
		if more, err := scanBatch(node, e.Elements, fn); err != nil || !more {
			return more, err
		}
		if cursor = e.Cursor; cursor == 0 {
			return true, nil
		}
	}
}

// scanBatch calls fn with a batch of keys of node, unless it is empty.
func scanBatch(node valkey.Client, keys []string, fn func(node valkey.Client, keys []string) (more bool, err error)) (bool, error) {
	if len(keys) == 0 {
		return true, nil
	}
	return fn(node, keys)
}

// Glob escapes s for a MATCH pattern: it matches s literally.
func Glob(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// Mode describes c: "standalone", "sentinel, master at ADDR" or "cluster,
// N primaries".
func Mode(ctx context.Context, c valkey.Client) string {
	switch c.Mode() {
	case valkey.ClientModeSentinel:
		return "sentinel, master at " + strings.Join(SortedAddrs(c.Nodes()), ",")
	case valkey.ClientModeCluster:
	default:
		return "standalone"
	}
	prims, err := Primaries(ctx, c)
	if err != nil {
		return "cluster"
	}
	return fmt.Sprintf("cluster, %d primaries", len(prims))
}
