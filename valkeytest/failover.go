package valkeytest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Changes of a running cluster's layout, for failover tests: a manual
// failover, a promotion awaited after a primary was killed, slots moved
// between primaries.

// Slot returns the cluster hash slot of key: CRC16 (XMODEM) of its hash
// tag, or of the whole key, modulo 16384. (An implementation of its own,
// so that tests check the store's against it.)
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	crc := 0
	for _, b := range []byte(key) {
		crc ^= int(b) << 8
		for range 8 {
			crc <<= 1
			if crc&0x10000 != 0 {
				crc ^= 0x11021
			}
		}
	}
	return crc & 16383
}

// PrimaryOf returns the index in Primaries of the primary that served slot
// when the cluster was formed.
func (c *Cluster) PrimaryOf(slot int) int {
	for i := range c.Primaries {
		if lo, hi := slotRange(i, len(c.Primaries)); lo <= slot && slot <= hi {
			return i
		}
	}
	return -1
}

// Do sends one command to s on a connection of its own: a string for
// simple and bulk replies, an int64, []any for arrays, nil for a null.
func (s *Server) Do(args ...string) (any, error) {
	rc, err := dialRESP(s.Addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return rc.Do(args...)
}

// ID returns s's cluster node ID.
func (s *Server) ID(t testing.TB) string {
	t.Helper()
	v, err := s.Do("CLUSTER", "MYID")
	id, ok := v.(string)
	if err != nil || !ok {
		t.Fatalf("valkeytest: %s: CLUSTER MYID: %v %v", s.Addr, v, err)
	}
	return id
}

// Owner returns the address of the primary that serves slot in s's view
// (CLUSTER SLOTS), or "".
func (s *Server) Owner(slot int) (string, error) {
	v, err := s.Do("CLUSTER", "SLOTS")
	if err != nil {
		return "", err
	}
	entries, _ := v.([]any)
	for _, e := range entries {
		if addr := slotsEntryOwner(e, slot); addr != "" {
			return addr, nil
		}
	}
	return "", nil
}

// slotsEntryOwner returns the address of the primary of e, one entry of
// CLUSTER SLOTS, when its range holds slot, or "".
func slotsEntryOwner(e any, slot int) string {
	f, _ := e.([]any)
	if len(f) < 3 {
		return ""
	}
	lo, _ := f[0].(int64)
	hi, _ := f[1].(int64)
	p, _ := f[2].([]any)
	if int64(slot) < lo || int64(slot) > hi || len(p) < 2 {
		return ""
	}
	host, _ := p[0].(string)
	port, _ := p[1].(int64)
	return host + ":" + strconv.FormatInt(port, 10)
}

// WaitOwner waits until every running node of c says that want serves
// slot and is reachable (cluster_state:ok), and returns how long that
// took. It fails t after timeout.
func (c *Cluster) WaitOwner(t testing.TB, slot int, want *Server, timeout time.Duration) time.Duration {
	t.Helper()
	begin := time.Now()
	for {
		views := c.ownerDisagreements(slot, want)
		if len(views) == 0 {
			return time.Since(begin)
		}
		if time.Since(begin) > timeout {
			t.Fatalf("valkeytest: %s does not serve slot %d after %v: %s", want.Addr, slot, timeout, strings.Join(views, "; "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ownerDisagreements returns the view of each running node that does not
// yet say that want serves slot and is reachable.
func (c *Cluster) ownerDisagreements(slot int, want *Server) []string {
	var views []string
	for _, s := range c.nodes() {
		if !s.Running() {
			continue
		}
		if view, ok := s.ownerView(slot, want); !ok {
			views = append(views, view)
		}
	}
	return views
}

// ownerView reports whether s says that want serves slot and the cluster
// is ok, and otherwise describes what s says.
func (s *Server) ownerView(slot int, want *Server) (string, bool) {
	owner, err := s.Owner(slot)
	info, err2 := s.Do("CLUSTER", "INFO")
	state, _ := info.(string)
	if err != nil || err2 != nil || owner != want.Addr || !strings.Contains(state, "cluster_state:ok") {
		return fmt.Sprintf("%s: owner %q, %v %v", s.Addr, owner, err, err2), false
	}
	return "", true
}

// Failover runs CLUSTER FAILOVER on replica (a graceful, coordinated
// failover: its primary stops taking writes until the replica has caught
// up) and waits until every node sees the replica as the primary of slot.
func (c *Cluster) Failover(t testing.TB, replica *Server, slot int) time.Duration {
	t.Helper()
	begin := time.Now()
	if _, err := replica.Do("CLUSTER", "FAILOVER"); err != nil {
		t.Fatalf("valkeytest: %s: CLUSTER FAILOVER: %v", replica.Addr, err)
	}
	c.WaitOwner(t, slot, replica, clusterTimeout)
	return time.Since(begin)
}

// MoveSlots moves slots lo to hi, with their keys, from the primary from
// to the primary to, one slot at a time, the way valkey-cli --cluster
// reshard does: IMPORTING and MIGRATING, MIGRATE of the keys in batches,
// then SETSLOT NODE on both and on every other primary. Clients meanwhile
// get ASK for keys already moved and TRYAGAIN for commands on several keys
// split between the two.
func (c *Cluster) MoveSlots(t testing.TB, from, to *Server, lo, hi int) {
	t.Helper()
	m := slotMove{t: t, from: from, to: to, fromID: from.ID(t), toID: to.ID(t)}
	for sl := lo; sl <= hi; sl++ {
		slot := strconv.Itoa(sl)
		m.must(to, "CLUSTER", "SETSLOT", slot, "IMPORTING", m.fromID)
		m.must(from, "CLUSTER", "SETSLOT", slot, "MIGRATING", m.toID)
		m.migrateKeys(slot)
		m.must(to, "CLUSTER", "SETSLOT", slot, "NODE", m.toID)
		m.must(from, "CLUSTER", "SETSLOT", slot, "NODE", m.toID)
		c.tellOthers(from, to, slot, m.toID)
	}
}

// slotMove is one MoveSlots: the two primaries and their IDs.
type slotMove struct {
	t            testing.TB
	from, to     *Server
	fromID, toID string
}

// must sends one command to s and fails t on an error reply.
func (m *slotMove) must(s *Server, args ...string) any {
	m.t.Helper()
	v, err := s.Do(args...)
	if err != nil {
		m.t.Fatalf("valkeytest: %s: %s: %v", s.Addr, strings.Join(args, " "), err)
	}
	return v
}

// migrateKeys moves the keys of slot, 100 at a time, with MIGRATE.
func (m *slotMove) migrateKeys(slot string) {
	m.t.Helper()
	toHost, toPort, _ := strings.Cut(m.to.Addr, ":")
	for {
		keys, _ := m.must(m.from, "CLUSTER", "GETKEYSINSLOT", slot, "100").([]any)
		if len(keys) == 0 {
			return
		}
		args := []string{"MIGRATE", toHost, toPort, "", "0", "5000", "REPLACE", "KEYS"}
		for _, k := range keys {
			args = append(args, k.(string))
		}
		m.must(m.from, args...)
	}
}

// tellOthers sets slot to the node toID on every running primary other
// than from and to (gossip would tell them too).
func (c *Cluster) tellOthers(from, to *Server, slot, toID string) {
	for _, p := range c.Primaries {
		if p != from && p != to && p.Running() {
			p.Do("CLUSTER", "SETSLOT", slot, "NODE", toID)
		}
	}
}

// StartReplica starts a standalone server replicating the primary at addr
// (REPLICAOF; addr may be a proxy in front of it) and waits until it has
// synced (master_link_status:up, at most 10s).
func StartReplica(t testing.TB, addr string, extra ...string) *Server {
	t.Helper()
	host, port, _ := strings.Cut(addr, ":")
	r := Start(t, append([]string{"--replicaof", host, port}, extra...)...)
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := r.Do("INFO", "replication")
		info, _ := v.(string)
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("valkeytest: replica %s of %s not synced after 10s: %v %s", r.Addr, addr, err, info)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Promote makes a replica a primary (REPLICAOF NO ONE).
func (s *Server) Promote(t testing.TB) {
	t.Helper()
	if _, err := s.Do("REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatalf("valkeytest: %s: REPLICAOF NO ONE: %v", s.Addr, err)
	}
}
