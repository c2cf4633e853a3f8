package doctor

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/valkeyops"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/valkey-io/valkey-go"
)

// version: Sluice's scripts declare flags (#!lua flags=...), which needs
// Valkey 7.2 or Redis 7.0 and later.
func (d *doc) version(ctx context.Context, addr string, node valkey.Client) {
	m, err := info(ctx, node, "server")
	if err != nil {
		d.add("version", Unknown, addr, "", "could not read INFO server: %v", err)
		return
	}
	d.versionOf(addr, m)
}

// versionOf judges the fields of INFO server.
func (d *doc) versionOf(addr string, m map[string]string) {
	name, v := "valkey", m["valkey_version"]
	if v == "" {
		name, v = "redis", m["redis_version"]
	}
	major, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	if major < 7 {
		d.add("version", Error, addr, "upgrade to Valkey 7.2 or later",
			"%s %s: Sluice's scripts need Valkey 7.2 or Redis 7.0 and later (script flags)", name, v)
		return
	}
	d.add("version", OK, addr, "", "%s %s", name, v)
}

// riskFixes is the setting that removes each risk valkeystore's
// Store.Risks names (which owns what settings lose counts or refuse
// decisions), and how bad the risk is.
var riskFixes = map[string]struct {
	fix string
	sev Severity
}{
	"maxmemory-policy":              {"maxmemory-policy noeviction (a full Valkey then refuses writes, and each policy's on_failure decides)", Error},
	"cluster-require-full-coverage": {"cluster-require-full-coverage no", Warning},
}

// risks reports what Store.Risks finds: the settings that lose counts or
// refuse decisions.
func (d *doc) risks(ctx context.Context, store *valkeystore.Store) {
	risks, err := store.Risks(ctx)
	for _, r := range risks {
		rf, ok := riskFixes[r.Setting]
		if !ok {
			rf.sev = Warning
		}
		d.add(r.Setting, rf.sev, r.Node, rf.fix, "%s %s: %s", r.Setting, r.Value, r.Cost)
		d.risked[r.Node+" "+r.Setting] = true
	}
	if err != nil {
		d.riskErr = err
	}
}

// eviction completes the risks for one node: noeviction is fine, an
// evicting policy without maxmemory is a risk waiting for maxmemory to be
// set.
func (d *doc) eviction(ctx context.Context, addr string, node valkey.Client) {
	if d.risked[addr+" maxmemory-policy"] {
		return
	}
	policy, err := configGet(ctx, node, "maxmemory-policy")
	if err != nil {
		d.couldNot("maxmemory-policy", addr, "maxmemory-policy", err)
		return
	}
	if policy == "noeviction" {
		d.add("maxmemory-policy", OK, addr, "", "noeviction: limiter keys are never evicted")
		return
	}
	d.add("maxmemory-policy", Warning, addr, riskFixes["maxmemory-policy"].fix,
		"%s would evict limiter keys (every Sluice key has a TTL, so volatile-* policies evict them too) as soon as maxmemory is set; it is 0 (no limit) now", policy)
}

// persistence: a restart without AOF forgets every count; that matters
// for long windows, where it hands out a fresh quota, and for in-flight
// policies with long leases, whose held leases it forgets.
func (d *doc) persistence(ctx context.Context, addr string, node valkey.Client) {
	long, leases := longPolicies(d.cfg.Policies)
	aof, err := configGet(ctx, node, "appendonly")
	if err != nil {
		d.couldNot("persistence", addr, "appendonly", err)
		return
	}
	if aof == "yes" {
		d.add("persistence", OK, addr, "", "appendonly yes: counts survive a restart")
		return
	}
	if len(long) == 0 && len(leases) == 0 {
		d.add("persistence", Info, addr, "appendonly yes, if counts must survive a restart",
			"appendonly no: a restart forgets all counts; no policy has a window or lease of %v or more, so that costs at most one window (for in_flight, one lease)", LongWindow)
		return
	}
	var lost []string
	if len(long) > 0 {
		lost = append(lost, "hands out fresh quotas for "+strings.Join(long, ", "))
	}
	if len(leases) > 0 {
		lost = append(lost, "forgets the leases held for "+strings.Join(leases, ", ")+
			": up to twice the limit may then be held at once, until the forgotten leases are released or would have ended")
	}
	d.add("persistence", Warning, addr, "appendonly yes (with appendfsync everysec)",
		"appendonly no %s: a restart %s", snapshots(ctx, node), strings.Join(lost, "; it "))
}

// longPolicies names the policies with a window of LongWindow or more,
// each with its window, and apart the in_flight policies with a lease of
// LongWindow or more, each with its lease.
func longPolicies(policies []*config.Policy) (long, leases []string) {
	for _, p := range policies {
		w := p.Window()
		switch {
		case w < LongWindow:
		case p.Algorithm == driver.AlgorithmInFlight:
			leases = append(leases, fmt.Sprintf("%s (lease %v)", p.Name, w))
		default:
			long = append(long, fmt.Sprintf("%s (%v)", p.Name, w))
		}
	}
	return long, leases
}

// snapshots says what node's RDB snapshots keep, for a server without
// AOF.
func snapshots(ctx context.Context, node valkey.Client) string {
	if save, _ := configGet(ctx, node, "save"); save != "" {
		return fmt.Sprintf("and RDB snapshots (save %q) lose what changed since the last one", save)
	}
	return "and no RDB snapshots"
}

// replication: replicas, their lag, and min-replicas-to-write.
func (d *doc) replication(ctx context.Context, addr string, node valkey.Client) {
	m, err := info(ctx, node, "replication")
	if err != nil {
		d.add("replication", Unknown, addr, "", "could not read INFO replication: %v", err)
		return
	}
	mrw, err := configGet(ctx, node, "min-replicas-to-write")
	d.replicationOf(addr, m, mrw, err)
}

// replicationOf judges the fields of INFO replication and the setting
// min-replicas-to-write (mrwErr when it could not be read).
func (d *doc) replicationOf(addr string, m map[string]string, mrw string, mrwErr error) {
	n, _ := strconv.Atoi(m["connected_slaves"])
	d.replicasOf(addr, m, n)
	d.minReplicasToWrite(addr, n, mrw, mrwErr)
}

// replicasOf judges the n replicas INFO replication (m) lists: none is
// worth a note outside a cluster (the cluster check says it per primary),
// and a replica more than a second behind is a warning.
func (d *doc) replicasOf(addr string, m map[string]string, n int) {
	if n == 0 {
		if !d.isCluster { // the cluster check says it per primary
			d.add("replication", Info, addr, "a replica (replicaof) and a failover mechanism (Sentinel or Cluster), if the limiter must survive this server",
				"no replica: if this server is lost, so are all counts, and decisions follow on_failure until it is back")
		}
		return
	}
	worst := worstLag(m, n)
	if worst > 1 {
		d.add("replication lag", Warning, addr, "find why the replica falls behind (network, load, repl-backlog-size)",
			"a replica lags %ds behind: a failover now would lose that much of the counts", worst)
	} else {
		d.add("replication lag", OK, addr, "", "%d replicas, lag at most %ds", n, worst)
	}
}

// worstLag returns the largest lag (seconds) of the n replicas in INFO
// replication's slaveN fields.
func worstLag(m map[string]string, n int) int {
	worst := 0
	for i := range n {
		for _, kv := range strings.Split(m["slave"+strconv.Itoa(i)], ",") {
			if k, v, ok := strings.Cut(kv, "="); ok && k == "lag" {
				lag, _ := strconv.Atoi(v)
				worst = max(worst, lag)
			}
		}
	}
	return worst
}

// minReplicasToWrite judges the setting min-replicas-to-write (mrwErr when
// it could not be read) against the n replicas connected.
func (d *doc) minReplicasToWrite(addr string, n int, mrw string, mrwErr error) {
	if mrwErr != nil {
		d.couldNot("min-replicas-to-write", addr, "min-replicas-to-write", mrwErr)
		return
	}
	k, _ := strconv.Atoi(mrw)
	switch {
	case k > n:
		d.add("min-replicas-to-write", Error, addr, fmt.Sprintf("min-replicas-to-write %d or less, or more replicas", n),
			"min-replicas-to-write %d with %d replicas connected: every write (every decision) is refused", k, n)
	case k == 0 && n > 0:
		d.add("min-replicas-to-write", Info, addr, "min-replicas-to-write 1 and min-replicas-max-lag 10 (writes then fail, and on_failure decides, while no replica is in sync)",
			"min-replicas-to-write 0: a failover may lose the counts written just before it")
	default:
		d.add("min-replicas-to-write", OK, addr, "", "min-replicas-to-write %d, %d replicas", k, n)
	}
}

// clockSkewMax is the skew between this host and a server worth a warning.
const clockSkewMax = time.Second

// clock compares the server's TIME with this host's clock. Sluice decides
// on Valkey's clock, so skew against this host is harmless by itself; but
// a node whose clock is off shifts the windows of its keys when they fail
// over to (or from) another node.
func (d *doc) clock(ctx context.Context, addr string, node valkey.Client) {
	t1 := time.Now()
	arr, err := node.Do(ctx, node.B().Time().Build()).AsIntSlice()
	t2 := time.Now()
	if err != nil || len(arr) != 2 {
		d.add("clock", Unknown, addr, "", "could not read TIME: %v", err)
		return
	}
	d.clockOf(addr, t1, t2, time.Unix(arr[0], arr[1]*1000))
}

// clockOf judges a server's TIME, server, read between t1 and t2 on this
// host's clock.
func (d *doc) clockOf(addr string, t1, t2, server time.Time) {
	rtt := t2.Sub(t1)
	skew := server.Sub(t1.Add(rtt / 2))
	if skew.Abs() > clockSkewMax {
		d.add("clock", Warning, addr, "synchronise the clocks (NTP, chrony) of this host and the Valkey servers",
			"the server's clock is %v off this host's (±%v): windows shift when keys fail over between nodes with different clocks", skew.Round(time.Millisecond), (rtt / 2).Round(time.Microsecond))
		return
	}
	d.add("clock", OK, addr, "", "skew %v (±%v)", skew.Round(time.Microsecond), (rtt / 2).Round(time.Microsecond))
}

// cluster: state, slot coverage and replicas per primary.
func (d *doc) cluster(ctx context.Context) {
	any := d.prims[valkeyops.SortedAddrs(d.prims)[0]]
	s, err := any.Do(ctx, any.B().ClusterInfo().Build()).ToString()
	if err != nil {
		d.add("cluster", Unknown, "", "", "could not read CLUSTER INFO: %v", err)
		return
	}
	d.clusterState(fields(s))
	nodes, err := any.Do(ctx, any.B().ClusterNodes().Build()).ToString()
	if err != nil {
		d.add("replicas", Unknown, "", "", "could not read CLUSTER NODES: %v", err)
		return
	}
	lonely, prims := primariesWithoutReplica(nodes)
	if len(lonely) > 0 {
		d.add("replicas", Warning, "", "add a replica to each primary (valkey-cli --cluster add-node NEW EXISTING --cluster-slave)",
			"%d of %d primaries have no replica (%s): if one fails, its slots get no decision (on_failure decides) and its counts are lost",
			len(lonely), prims, strings.Join(lonely, ", "))
		return
	}
	d.add("replicas", OK, "", "", "every primary of %d has a replica", prims)
}

// clusterState reports the cluster's state and slot coverage, from the
// fields m of CLUSTER INFO.
func (d *doc) clusterState(m map[string]string) {
	if m["cluster_state"] != "ok" || m["cluster_slots_ok"] != "16384" {
		d.add("cluster", Error, "", "assign every slot to a primary that is up (valkey-cli --cluster fix)",
			"cluster_state %s, %s of 16384 slots ok (%s assigned, %s failing): keys of the missing slots get no decision (on_failure decides)",
			m["cluster_state"], m["cluster_slots_ok"], m["cluster_slots_assigned"], m["cluster_slots_fail"])
		return
	}
	d.add("cluster", OK, "", "", "cluster_state ok, 16384 slots covered by %s primaries", m["cluster_size"])
}

// primariesWithoutReplica reads CLUSTER NODES: the addresses, sorted, of
// the primaries that serve slots and have no replica that is up, and how
// many primaries serve slots.
func primariesWithoutReplica(nodes string) (lonely []string, primaries int) {
	prims, replicaOf := parseClusterNodes(nodes)
	for _, id := range replicaOf {
		if p := prims[id]; p != nil {
			p.replicas++
		}
	}
	for _, p := range prims {
		if p.replicas == 0 {
			lonely = append(lonely, p.addr)
		}
	}
	slices.Sort(lonely)
	return lonely, len(prims)
}

// clusterPrimary is a primary of CLUSTER NODES that serves slots, and
// its replicas that are up.
type clusterPrimary struct {
	addr     string
	replicas int
}

// parseClusterNodes reads CLUSTER NODES: the primaries that serve slots,
// by node id, and the primary's id of each replica that is up.
func parseClusterNodes(nodes string) (prims map[string]*clusterPrimary, replicaOf []string) {
	prims = map[string]*clusterPrimary{}
	for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		flags := strings.Split(f[2], ",")
		addr, _, _ := strings.Cut(f[1], "@")
		switch {
		case slices.Contains(flags, "master") && len(f) > 8: // serves slots
			prims[f[0]] = &clusterPrimary{addr: addr}
		case slices.Contains(flags, "slave") && !slices.Contains(flags, "fail"):
			replicaOf = append(replicaOf, f[3])
		}
	}
	return prims, replicaOf
}

// probePolicies are one policy per algorithm, to run every script.
var probePolicies = []sluice.Policy{
	sluice.FixedWindow{Limit: 1000, Window: time.Minute},
	sluice.SlidingLog{Limit: 1000, Window: time.Minute},
	sluice.SlidingWindow{Limit: 1000, Window: time.Minute},
	sluice.TokenBucket{Capacity: 1000, Rate: 1000, Per: time.Minute},
	sluice.GCRA{Rate: 1000, Per: time.Minute, Burst: 1000},
}

// scripts makes a decision with every algorithm's script under the
// deployment's own key prefix (with a limiter name no policy uses, so that
// key patterns of ACLs apply as to real keys), then times decisions and
// compares their p99 with each policy's timeout. The keys are deleted
// afterwards.
func (d *doc) scripts(ctx context.Context, store *valkeystore.Store) {
	name := d.prefix
	defer d.cleanup(ctx, d.cfg.Prefix+":"+name)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var gcra *sluice.Limiter
	for _, p := range probePolicies {
		l, ok := d.probe(ctx, store, p, name, quiet)
		if !ok {
			return
		}
		if rule, _ := p.Rule(); rule.Algorithm == driver.AlgorithmGCRA {
			gcra = l
		}
	}
	d.add("scripts", OK, "", "", "the scripts of all five algorithms load and decide under the prefix %s", d.cfg.Prefix)
	d.latency(ctx, gcra)
}

// probe makes one decision with policy p's script, under a limiter named
// after name and p's algorithm; false, reported, when it cannot.
func (d *doc) probe(ctx context.Context, store *valkeystore.Store, p sluice.Policy, name string, quiet *slog.Logger) (*sluice.Limiter, bool) {
	rule, _ := p.Rule()
	l, err := sluice.New(store, p, sluice.WithPrefix(d.cfg.Prefix), sluice.WithName(name+"."+rule.Algorithm.String()),
		sluice.WithTimeout(5*time.Second), sluice.WithDenyCache(false), sluice.WithLogger(quiet))
	if err != nil {
		d.add("scripts", Error, "", "", "%v", err)
		return nil, false
	}
	res, err := l.Allow(ctx, "probe")
	if err == nil && res.Degraded {
		err = fmt.Errorf("degraded decision")
	}
	if err != nil || !res.Allowed {
		d.add("scripts", Error, "", "grant the user the commands the scripts need: +@scripting +@read +@write +time on the key prefix "+d.cfg.Prefix+":*",
			"the %v script could not decide: %v (allowed %v)", rule.Algorithm, err, res.Allowed)
		return nil, false
	}
	return l, true
}

// latency times decisions on random keys (spread over the slots) and
// compares the p99 with each policy's timeout: a timeout below the p99
// degrades decisions under ordinary load.
func (d *doc) latency(ctx context.Context, l *sluice.Limiter) {
	n := d.opts.Samples
	took, err := timeDecisions(ctx, l, n)
	if err != nil {
		d.add("latency", Unknown, "", "", "timing decisions: %v", err)
		return
	}
	p50, p99 := took[n/2], took[min(n-1, n*99/100)]
	// Policies with one timeout share one finding.
	timeouts, byTimeout := policiesByTimeout(d.cfg.Policies)
	flagged := false
	suggest := max(3*p99, 10*time.Millisecond).Round(time.Millisecond)
	for _, t := range timeouts {
		what := policiesNamed(byTimeout[t])
		fix := fmt.Sprintf("timeout: %v or more on %s (or valkey.timeout)", suggest, what)
		switch {
		case t <= p99:
			flagged = true
			d.add("latency", Error, "", fix, "%s: timeout %v is below the measured p99 of %v: decisions degrade under ordinary load", what, t, p99.Round(time.Microsecond))
		case t < 2*p99:
			flagged = true
			d.add("latency", Warning, "", fix, "%s: timeout %v is less than twice the measured p99 of %v: a load spike degrades decisions", what, t, p99.Round(time.Microsecond))
		}
	}
	if !flagged {
		d.add("latency", OK, "", "", "decision round trip p50 %v, p99 %v over %d decisions; every policy's timeout is above twice the p99",
			p50.Round(time.Microsecond), p99.Round(time.Microsecond), n)
	}
}

// policiesNamed is "policy NAME" or "policies A, B".
func policiesNamed(names []string) string {
	if len(names) > 1 {
		return "policies " + strings.Join(names, ", ")
	}
	return "policy " + strings.Join(names, ", ")
}

// timeDecisions times n peeks on random keys (spread over the slots) and
// returns their durations, shortest first.
func timeDecisions(ctx context.Context, l *sluice.Limiter, n int) ([]time.Duration, error) {
	took := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if _, err := l.Peek(ctx, strconv.FormatUint(rand.Uint64(), 36)); err != nil {
			return nil, err
		}
		took = append(took, time.Since(t0))
	}
	slices.Sort(took)
	return took, nil
}

// policiesByTimeout groups the policies' names by their timeout (the
// default for none), and returns the timeouts in order.
func policiesByTimeout(policies []*config.Policy) ([]time.Duration, map[time.Duration][]string) {
	byTimeout := map[time.Duration][]string{}
	var timeouts []time.Duration
	for _, p := range policies {
		t := p.Timeout
		if t == 0 {
			t = sluice.DefaultTimeout
		}
		if byTimeout[t] == nil {
			timeouts = append(timeouts, t)
		}
		byTimeout[t] = append(byTimeout[t], p.Name)
	}
	slices.Sort(timeouts)
	return timeouts, byTimeout
}

// acl asks the server whether the connected user may run what Sluice
// runs besides the scripts: DEL (sluice reset, Reset), and SCAN, PTTL and
// MEMORY USAGE (sluice keys).
func (d *doc) acl(ctx context.Context) {
	node := d.prims[valkeyops.SortedAddrs(d.prims)[0]]
	user, err := node.Do(ctx, node.B().AclWhoami().Build()).ToString()
	if err != nil {
		d.add("acl", Unknown, "", "", "could not check permissions: ACL WHOAMI: %v", err)
		return
	}
	key := d.cfg.Prefix + ":" + d.prefix + ":{probe}"
	var denied []string
	for _, cmd := range [][]string{{"EVALSHA", "0000000000000000000000000000000000000000", "1", key}, {"DEL", key}, {"SCAN", "0"}, {"PTTL", key}, {"MEMORY", "USAGE", key}} {
		why, err := dryRun(ctx, node, user, cmd)
		if err != nil {
			d.add("acl", Unknown, "", "", "could not check permissions: user %q may not run ACL DRYRUN (%v); the scripts check above ran real decisions", user, err)
			return
		}
		if why != "" {
			denied = append(denied, why)
		}
	}
	if len(denied) > 0 {
		d.add("acl", Warning, "", fmt.Sprintf("ACL SETUSER %s +evalsha +eval +del +scan +pttl +memory|usage ~%s:*", user, d.cfg.Prefix),
			"user %q may not run: %s (decisions need EVALSHA; sluice reset needs DEL; sluice keys needs SCAN, PTTL, MEMORY USAGE)", user, strings.Join(denied, "; "))
		return
	}
	d.add("acl", OK, "", "", "user %q may run EVALSHA, DEL, SCAN, PTTL and MEMORY USAGE on %s:*", user, d.cfg.Prefix)
}

// dryRun asks node whether user may run cmd (ACL DRYRUN): "" when it
// may, else the command and why not; an error when user may not ask.
func dryRun(ctx context.Context, node valkey.Client, user string, cmd []string) (string, error) {
	args := append([]string{"DRYRUN", user}, cmd...)
	s, err := node.Do(ctx, node.B().Arbitrary("ACL").Args(args...).Build()).ToString()
	switch {
	case err != nil && strings.Contains(err.Error(), "NOPERM") && strings.Contains(strings.ToLower(err.Error()), "acl"):
		return "", err
	case err != nil:
		return fmt.Sprintf("%s (%v)", cmd[0], err), nil
	case s != "OK":
		return fmt.Sprintf("%s (%s)", strings.Join(cmd[:min(len(cmd), 2)], " "), s), nil
	}
	return "", nil
}

// cleanup deletes the probe keys under prefix.
func (d *doc) cleanup(ctx context.Context, prefix string) {
	valkeyops.Scan(ctx, d.client, valkeyops.Glob(prefix)+"*", func(node valkey.Client, keys []string) (bool, error) {
		for _, k := range keys {
			node.Do(ctx, node.B().Del().Key(k).Build())
		}
		return true, nil
	})
}
