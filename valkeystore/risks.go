package valkeystore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/valkey-io/valkey-go"
)

// A Risk is a server setting under which Valkey loses counts or refuses
// decisions that it could make, found by Store.Risks.
type Risk struct {
	Node    string // the node's address
	Setting string // the configuration parameter
	Value   string // its value
	Cost    string // what it costs, in a sentence
}

func (r Risk) String() string {
	return fmt.Sprintf("%s: %s %s: %s", r.Node, r.Setting, r.Value, r.Cost)
}

// Risks reads the settings of every primary (CONFIG GET) that can lose
// counts or refuse decisions:
//
//   - maxmemory-policy other than noeviction, with maxmemory set: when
//     memory is full, Valkey evicts keys, limiter state included (every
//     key of a limiter has a time to live, so the volatile-* policies evict
//     them too), and an evicted key starts again with the full limit: the
//     loss of counts has no bound. Under noeviction a full server refuses
//     the scripts instead (OOM), and the limiters decide by their fail mode.
//   - cluster-require-full-coverage yes (Valkey's default): from the moment
//     a primary is marked failed until its replica is promoted, every node
//     of the cluster refuses every command (CLUSTERDOWN), so a dead primary
//     degrades every decision, not only those of its slots.
//
// Servers where CONFIG is disabled or renamed (managed services often do)
// cannot be read: Risks then returns the risks it found elsewhere and an
// error naming the nodes it could not read. The settings are read when
// Risks is called; a later CONFIG SET is not seen.
func (s *Store) Risks(ctx context.Context) ([]Risk, error) {
	e := s.e
	var risks []Risk
	var errs []error
	for addr, c := range e.primaries() {
		r, err := risksOf(ctx, addr, c, e.cluster)
		risks = append(risks, r...)
		if err != nil {
			errs = append(errs, fmt.Errorf("valkeystore: cannot read the settings of %s: %w", addr, err))
		}
	}
	return risks, errors.Join(errs...)
}

// primaries returns a client of each primary: the server of a standalone
// client, or each primary of the cluster's slot map.
func (e *engine) primaries() map[string]valkey.Client {
	clients := e.client.Nodes()
	if !e.cluster {
		return clients
	}
	out := map[string]valkey.Client{}
	if tab := e.topo.table.Load(); tab != nil {
		for _, n := range tab {
			if n == nil {
				continue
			}
			if c, ok := clients[n.name]; ok {
				out[n.name] = c
			}
		}
	}
	return out
}

func risksOf(ctx context.Context, addr string, c valkey.Client, cluster bool) ([]Risk, error) {
	params := []string{"maxmemory-policy", "maxmemory"}
	if cluster {
		params = append(params, "cluster-require-full-coverage")
	}
	m, err := c.Do(ctx, c.B().ConfigGet().Parameter(params...).Build()).AsStrMap()
	if err != nil {
		return nil, err
	}
	var risks []Risk
	if r, ok := evictionRisk(addr, m); ok {
		risks = append(risks, r)
	}
	if r, ok := coverageRisk(addr, m); ok {
		risks = append(risks, r)
	}
	return risks, nil
}

// evictionRisk is the risk of node addr's settings m evicting keys: a
// maxmemory with a maxmemory-policy other than noeviction.
func evictionRisk(addr string, m map[string]string) (Risk, bool) {
	p, ok := m["maxmemory-policy"]
	if !ok || p == "noeviction" {
		return Risk{}, false
	}
	if mm, err := strconv.ParseInt(m["maxmemory"], 10, 64); err != nil || mm <= 0 {
		return Risk{}, false
	}
	return Risk{Node: addr, Setting: "maxmemory-policy", Value: p,
		Cost: "when memory is full Valkey evicts limiter keys, and an evicted key starts again with its full limit (use noeviction: a full server then refuses, and each policy's fail mode decides)"}, true
}

// coverageRisk is the risk of node addr's settings m refusing every
// command while a primary fails: cluster-require-full-coverage yes.
func coverageRisk(addr string, m map[string]string) (Risk, bool) {
	v, ok := m["cluster-require-full-coverage"]
	if !ok || !strings.EqualFold(v, "yes") {
		return Risk{}, false
	}
	return Risk{Node: addr, Setting: "cluster-require-full-coverage", Value: v,
		Cost: "while a failed primary waits for its replica's promotion, every node refuses every command, so every decision is degraded (set it to no: a dead primary then costs only its own slots)"}, true
}
