package valkeytest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"
)

// clusterTimeout bounds the wait for a new cluster to agree on its slot map.
const clusterTimeout = 20 * time.Second

// A Cluster is a Valkey Cluster of valkey-server processes on 127.0.0.1.
type Cluster struct {
	// Addrs are the primaries' addresses, Primaries[i].Addr.
	Addrs []string
	// Primaries are the primary nodes; Primaries[i] serves slots
	// i*16384/n to (i+1)*16384/n-1.
	Primaries []*Server
	// Replicas are the replica nodes (none unless WithReplicas):
	// Replicas[j] replicates Primaries[j%len(Primaries)].
	Replicas []*Server
}

// A ClusterOption configures StartCluster.
type ClusterOption func(*clusterConfig)

type clusterConfig struct {
	replicas int
	extra    []string
}

// WithReplicas gives every primary n replicas (default 0). StartCluster
// returns once every replica is connected to its primary.
func WithReplicas(n int) ClusterOption {
	return func(c *clusterConfig) { c.replicas = n }
}

// WithArgs appends args to every node's command line.
func WithArgs(args ...string) ClusterOption {
	return func(c *clusterConfig) { c.extra = append(c.extra, args...) }
}

// StartCluster starts a Valkey Cluster of primaries primaries (and replicas
// with WithReplicas) on free loopback ports, with no persistence and a
// cluster node timeout of 2s. It assigns the 16384 slots evenly, joins the
// nodes, and waits until every node reports cluster_state:ok and all agree
// on the slot map (at most 20s; it fails t with the nodes' views and output
// otherwise). The nodes are stopped in t.Cleanup.
//
// A cluster takes about 2.2s to start, whatever its size: Valkey keeps a
// primary's cluster state "fail" for 2s after the process starts. Tests that
// need no cluster of their own should use SharedCluster.
func StartCluster(t testing.TB, primaries int, opts ...ClusterOption) *Cluster {
	t.Helper()
	Require(t)
	var cfg clusterConfig
	for _, o := range opts {
		o(&cfg)
	}
	c, err := startCluster(t.TempDir(), primaries, cfg)
	if c != nil {
		c.stopInCleanup(t)
	}
	if err != nil {
		if c != nil {
			t.Logf("valkey-server output:\n%s", c.logs())
		}
		t.Fatalf("valkeytest: cluster: %v", err)
	}
	return c
}

// startCluster starts the nodes in subdirectories of dir and forms the
// cluster. On error the returned Cluster, if not nil, holds the nodes to
// log and stop.
func startCluster(dir string, primaries int, cfg clusterConfig) (*Cluster, error) {
	if err := checkClusterSize(primaries, cfg.replicas); err != nil {
		return nil, err
	}
	nodes, err := startNodes(dir, primaries*(1+cfg.replicas), cfg.extra)
	c := &Cluster{Primaries: nodes[:primaries], Replicas: nodes[primaries:]}
	if err != nil {
		return c, err
	}
	for _, s := range c.Primaries {
		c.Addrs = append(c.Addrs, s.Addr)
	}
	if err := c.form(); err != nil {
		return c, err
	}
	return c, nil
}

// checkClusterSize refuses a count of primaries outside 1..100 and a
// negative count of replicas per primary.
func checkClusterSize(primaries, replicas int) error {
	if primaries < 1 || primaries > 100 {
		return fmt.Errorf("%d primaries: want 1 to 100", primaries)
	}
	if replicas < 0 {
		return fmt.Errorf("%d replicas per primary: want 0 or more", replicas)
	}
	return nil
}

// startNodes starts n cluster nodes at once, in subdirectories of dir,
// with the extra arguments; a node that failed to start is nil, and the
// error joins every node's.
func startNodes(dir string, n int, extra []string) ([]*Server, error) {
	nodes := make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodes[i], errs[i] = startServer(mkdir(dir, i), true, extra)
		}()
	}
	wg.Wait()
	return nodes, errors.Join(errs...)
}

// stopInCleanup stops c in t.Cleanup, first logging the tail of each
// node's output when t failed.
func (c *Cluster) stopInCleanup(t testing.TB) {
	t.Cleanup(func() {
		if t.Failed() {
			for _, s := range c.nodes() {
				t.Logf("valkey-server %s output (tail):\n%s", s.Addr, s.log.Tail(2048))
			}
		}
		c.Stop()
	})
}

func mkdir(parent string, i int) string {
	d := filepath.Join(parent, "node"+strconv.Itoa(i))
	// MkdirAll's error shows up as valkey-server's failure to chdir.
	_ = os.MkdirAll(d, 0o755)
	return d
}

func (c *Cluster) nodes() []*Server {
	var out []*Server
	for _, s := range append(slices.Clip(c.Primaries), c.Replicas...) {
		if s != nil {
			out = append(out, s)
		}
	}
	return out
}

func (c *Cluster) logs() string {
	var b strings.Builder
	for _, s := range c.nodes() {
		fmt.Fprintf(&b, "=== %s ===\n%s\n", s.Addr, s.log.String())
	}
	return b.String()
}

// slotRange returns the slots of primary i of n.
func slotRange(i, n int) (lo, hi int) {
	return i * 16384 / n, (i+1)*16384/n - 1
}

// form assigns the slots, joins the nodes and waits until they agree.
func (c *Cluster) form() error {
	nodes := c.nodes()
	conns := make([]*respConn, len(nodes))
	for i, s := range nodes {
		rc, err := dialRESP(s.Addr, 2*time.Second)
		if err != nil {
			return err
		}
		defer rc.Close()
		conns[i] = rc
	}
	ids, err := c.assignSlots(nodes, conns)
	if err != nil {
		return err
	}
	if err := meetAll(nodes, conns); err != nil {
		return err
	}
	deadline := time.Now().Add(clusterTimeout)
	if err := c.replicate(conns, ids, deadline); err != nil {
		return err
	}
	return c.awaitAgreement(nodes, conns, ids, deadline)
}

// assignSlots gives every node a distinct config epoch and each primary
// its range of slots, and returns the nodes' ids.
func (c *Cluster) assignSlots(nodes []*Server, conns []*respConn) ([]string, error) {
	ids := make([]string, len(nodes))
	for i, rc := range conns {
		id, err := rc.DoString("CLUSTER", "MYID")
		if err != nil {
			return nil, fmt.Errorf("%s: CLUSTER MYID: %w", nodes[i].Addr, err)
		}
		ids[i] = id
		// Distinct epochs up front spare the nodes the collision
		// resolution that would otherwise delay agreement.
		if _, err := rc.Do("CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return nil, fmt.Errorf("%s: CLUSTER SET-CONFIG-EPOCH: %w", nodes[i].Addr, err)
		}
	}
	for i := range c.Primaries {
		lo, hi := slotRange(i, len(c.Primaries))
		if _, err := conns[i].Do("CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			return nil, fmt.Errorf("%s: CLUSTER ADDSLOTSRANGE %d %d: %w", nodes[i].Addr, lo, hi, err)
		}
	}
	return ids, nil
}

// meetAll has every node meet every other, rather than learn of them by
// gossip: agreement comes sooner.
func meetAll(nodes []*Server, conns []*respConn) error {
	for i, rc := range conns {
		for j := i + 1; j < len(nodes); j++ {
			s := nodes[j]
			if _, err := rc.Do("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(s.port), strconv.Itoa(s.busPort)); err != nil {
				return fmt.Errorf("%s: CLUSTER MEET %s: %w", nodes[i].Addr, s.Addr, err)
			}
		}
	}
	return nil
}

// replicate has each replica follow its primary, retrying until the
// replica knows the primary or the deadline passes.
func (c *Cluster) replicate(conns []*respConn, ids []string, deadline time.Time) error {
	for j, s := range c.Replicas {
		primary := j % len(c.Primaries)
		rc := conns[len(c.Primaries)+j]
		for {
			_, err := rc.Do("CLUSTER", "REPLICATE", ids[primary])
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: CLUSTER REPLICATE %s: %w", s.Addr, ids[primary], err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// awaitAgreement waits until every node sees the cluster as it was
// formed, or the deadline passes.
func (c *Cluster) awaitAgreement(nodes []*Server, conns []*respConn, ids []string, deadline time.Time) error {
	want := c.expectedView(ids)
	var last []string
	for {
		last = last[:0]
		for i, rc := range conns {
			if problem := checkNode(rc, len(nodes), want, i >= len(c.Primaries)); problem != "" {
				last = append(last, nodes[i].Addr+": "+problem)
			}
		}
		if len(last) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no agreement within %v:\n  %s", clusterTimeout, strings.Join(last, "\n  "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// expectedView is the slot map every node must report, in the form
// viewOf returns.
func (c *Cluster) expectedView(ids []string) string {
	var lines []string
	for i, s := range c.Primaries {
		lo, hi := slotRange(i, len(c.Primaries))
		lines = append(lines, fmt.Sprintf("%s %s master - %d-%d", ids[i], s.Addr, lo, hi))
	}
	for j, s := range c.Replicas {
		lines = append(lines, fmt.Sprintf("%s %s slave %s", ids[len(c.Primaries)+j], s.Addr, ids[j%len(c.Primaries)]))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// checkNode returns what is still wrong with one node's view, or "".
func checkNode(rc *respConn, nodes int, want string, replica bool) string {
	if problem := checkClusterInfo(rc, nodes); problem != "" {
		return problem
	}
	raw, err := rc.DoString("CLUSTER", "NODES")
	if err != nil {
		return "CLUSTER NODES: " + err.Error()
	}
	if got := viewOf(raw); got != want {
		return fmt.Sprintf("CLUSTER NODES view\n%s\n  want\n%s", got, want)
	}
	if replica {
		return checkReplicaLink(rc)
	}
	return ""
}

// checkClusterInfo returns what CLUSTER INFO lacks of a formed cluster of
// nodes nodes, or "".
func checkClusterInfo(rc *respConn, nodes int) string {
	info, err := rc.DoString("CLUSTER", "INFO")
	if err != nil {
		return "CLUSTER INFO: " + err.Error()
	}
	for _, kv := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_slots_ok:16384", "cluster_known_nodes:" + strconv.Itoa(nodes)} {
		if !strings.Contains(info, kv+"\r\n") {
			return "CLUSTER INFO lacks " + kv
		}
	}
	return ""
}

// checkReplicaLink returns "" when the replica's ROLE says it is
// connected to its primary, or what is wrong.
func checkReplicaLink(rc *respConn) string {
	role, err := rc.Do("ROLE")
	if err != nil {
		return "ROLE: " + err.Error()
	}
	r, _ := role.([]any)
	if len(r) < 4 || r[0] != "slave" || r[3] != "connected" {
		return fmt.Sprintf("replica not connected: ROLE %v", role)
	}
	return ""
}

// viewOf reduces CLUSTER NODES to "id addr role master slots" lines, sorted;
// nodes in handshake or failure states show their flags so they never
// match.
func viewOf(nodes string) string {
	var lines []string
	for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
		if f := strings.Fields(line); len(f) >= 8 {
			lines = append(lines, nodeView(f))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// nodeView is the line of viewOf for f, the fields of one line of CLUSTER
// NODES.
func nodeView(f []string) string {
	id, addr, flags, master := f[0], f[1], f[2], f[3]
	if i := strings.IndexAny(addr, "@,"); i >= 0 {
		addr = addr[:i]
	}
	role := roleOf(flags)
	if f[7] != "connected" {
		role += "!" + f[7]
	}
	l := id + " " + addr + " " + role + " " + master
	if len(f) > 8 {
		l += " " + strings.Join(f[8:], " ")
	}
	return l
}

// roleOf is the role in a node's CLUSTER NODES flags, followed by every
// flag of a state other than normal, each after a '!'.
func roleOf(flags string) string {
	role := ""
	for _, fl := range strings.Split(flags, ",") {
		switch fl {
		case "master", "slave":
			role = fl
		case "myself", "noflags":
		default: // handshake, fail, fail?, noaddr, nofailover...
			role += "!" + fl
		}
	}
	return role
}

// Client returns a cluster client of c (InitAddress = Addrs), closed in
// t.Cleanup. opts adjust the options.
func (c *Cluster) Client(t testing.TB, opts ...func(*valkey.ClientOption)) valkey.Client {
	t.Helper()
	cl, err := newClient(slices.Clone(c.Addrs), false, opts)
	if err != nil {
		t.Fatalf("valkeytest: cluster client of %v: %v", c.Addrs, err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Stop stops every node. It is idempotent.
func (c *Cluster) Stop() {
	var wg sync.WaitGroup
	for _, s := range c.nodes() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Stop()
		}()
	}
	wg.Wait()
}
