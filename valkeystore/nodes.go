package valkeystore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valkey-io/valkey-go"
)

// Health per node. A node is what fails as one: a standalone server (or
// the master a Sentinel client follows), or one primary of a cluster with
// the slots it serves. Each node has its own circuit breaker, batcher and
// deadline guard, so a dead primary costs only the decisions whose slots
// it serves: decisions on the other primaries neither queue behind its
// calls nor are refused by its breaker. (The batchers share a budget of
// calls in flight, in which each node keeps a call of its own; see
// budget.go.)
//
// valkey-go routes every command by its slot and does not tell which node
// it went to, so the store keeps its own map of slots to primaries, read
// from CLUSTER SLOTS: when the Store is made, at most once a second while
// decisions are made, soon after a call fails, and by every probe of an
// open breaker. A decision is accounted to the node that serves its key's
// slot in that map. Between a change of the cluster's layout and the next
// read of the map, a decision may be accounted to the node that served its
// slot before; the probe of that node's breaker reads the map again and
// closes the breaker once the node serves no slot any more (its slots were
// moved, or a replica was promoted in its place).

// A node is one unit of health; see above.
type node struct {
	e       *engine
	name    string   // its address, as valkey-go's Nodes names it
	breaker *breaker // nil when the breaker is off
	batcher *batcher // nil when batching is off
	guard   guard    // the deadline layer; see deadline.go

	// direct is valkey-go's client of this node alone (one of the cluster
	// client's Nodes, on the same connections), which sends the calls
	// whose keys span several of its slots; nil until the node is in
	// valkey-go's map too. See cross.go.
	direct atomic.Pointer[valkey.Client]

	mu     sync.Mutex
	askKey string // a key of askOf, for askSlot
	askOf  uint16
}

func (e *engine) newNode(name string) *node {
	n := &node{e: e, name: name}
	if e.breakerCfg != nil {
		n.breaker = newBreaker(e.breakerCfg, n)
	}
	if e.budget != nil {
		n.batcher = newBatcher(e, n)
	}
	return n
}

// topology maps keys to nodes.
type topology struct {
	single *node // standalone and Sentinel: the only node

	// cluster
	mu     sync.Mutex
	byName map[string]*node // every node seen, by address
	none   *node            // the slots not (yet) in the map
	table  atomic.Pointer[[numSlots]*node]
	busy   atomic.Bool  // a refresh runs
	last   atomic.Int64 // UnixNano of the latest refresh begun
}

const numSlots = 16384

// Map refreshes: at most every refreshEvery while decisions are made, and
// at most every refreshAfterFailure after failed calls.
const (
	refreshEvery        = time.Second
	refreshAfterFailure = 50 * time.Millisecond
	refreshTimeout      = time.Second
)

func (e *engine) initTopology() {
	t := &e.topo
	if !e.cluster {
		name := "valkey"
		for addr := range e.client.Nodes() {
			name = addr // a standalone client has one node
		}
		if e.client.Mode() == valkey.ClientModeSentinel {
			name = "master" // whichever server the Sentinels name: it changes
		}
		t.single = e.newNode(name)
		return
	}
	t.byName = make(map[string]*node)
	t.none = e.newNode("unknown")
	ctx, cancel := context.WithTimeout(context.Background(), refreshTimeout)
	defer cancel()
	e.refresh(ctx) // an error leaves every slot on t.none until a later refresh
}

// nodeOf returns the node that serves key.
func (e *engine) nodeOf(key string) *node {
	t := &e.topo
	if t.single != nil {
		return t.single
	}
	e.refreshIfOlder(refreshEvery)
	if tab := t.table.Load(); tab != nil {
		if n := tab[slot(key)]; n != nil {
			return n
		}
	}
	return t.none
}

// nodes returns every node the store knows.
func (e *engine) nodes() []*node {
	t := &e.topo
	if t.single != nil {
		return []*node{t.single}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	out := []*node{t.none}
	for _, n := range t.byName {
		out = append(out, n)
	}
	return out
}

// refreshIfOlder starts a refresh of the slot map in the background when
// the latest began more than age ago and none runs.
func (e *engine) refreshIfOlder(age time.Duration) {
	t := &e.topo
	if t.single != nil || time.Now().UnixNano()-t.last.Load() < int64(age) {
		return
	}
	if !t.busy.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer t.busy.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), refreshTimeout)
		defer cancel()
		e.refresh(ctx)
	}()
}

// refresh reads the slot map (CLUSTER SLOTS) from the first node that
// answers, in random order, and installs it.
func (e *engine) refresh(ctx context.Context) error {
	t := &e.topo
	t.last.Store(time.Now().UnixNano())
	clients := e.client.Nodes()
	addrs := make([]string, 0, len(clients))
	for a := range clients {
		addrs = append(addrs, a)
	}
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	err := fmt.Errorf("valkeystore: no cluster node to ask for the slot map")
	for _, a := range addrs {
		c := clients[a]
		// Each node gets a share of the time, so that a hung node does
		// not take all of it.
		nctx, cancel := context.WithTimeout(ctx, refreshTimeout/4)
		var owners map[string][][2]int64
		owners, err = parseSlots(c.Do(nctx, c.B().ClusterSlots().Build()), a)
		cancel()
		if err == nil {
			e.install(owners)
			return nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return err
}

// install makes owners (slot ranges by primary address) the slot map.
func (e *engine) install(owners map[string][][2]int64) {
	t := &e.topo
	var tab [numSlots]*node
	clients := e.client.Nodes()
	t.mu.Lock()
	for addr, ranges := range owners {
		n := t.byName[addr]
		if n == nil {
			n = e.newNode(addr)
			t.byName[addr] = n
		}
		if c, ok := clients[addr]; ok {
			n.direct.Store(&c)
		}
		for _, r := range ranges {
			for i := r[0]; i <= r[1]; i++ {
				tab[i] = n
			}
		}
	}
	t.mu.Unlock()
	t.table.Store(&tab)
	if e.budget != nil {
		e.budget.primaries(len(owners))
	}
}

// slotsOf returns the first slot n serves in the current map, and whether
// it serves any.
func (e *engine) slotsOf(n *node) (uint16, bool) {
	if e.topo.single != nil {
		return 0, n == e.topo.single
	}
	tab := e.topo.table.Load()
	if tab == nil {
		return 0, n == e.topo.none
	}
	for i, o := range tab {
		if o == n || o == nil && n == e.topo.none {
			return uint16(i), true
		}
	}
	return 0, false
}

// parseSlots reads a CLUSTER SLOTS reply, asked of the node at from:
// the slot ranges of each primary.
func parseSlots(r valkey.ValkeyResult, from string) (map[string][][2]int64, error) {
	entries, err := r.ToArray()
	if err != nil {
		return nil, fmt.Errorf("valkeystore: cluster slots from %s: %w", from, err)
	}
	fromHost, _, _ := net.SplitHostPort(from)
	owners := make(map[string][][2]int64)
	for _, e := range entries {
		lo, hi, primary, ok := slotEntry(e)
		if !ok {
			return nil, fmt.Errorf("valkeystore: cluster slots from %s: malformed entry", from)
		}
		addr, err := primaryAddr(primary, fromHost)
		if err != nil {
			return nil, fmt.Errorf("valkeystore: cluster slots from %s: malformed port", from)
		}
		owners[addr] = append(owners[addr], [2]int64{lo, hi})
	}
	return owners, nil
}

// slotEntry reads one entry of a CLUSTER SLOTS reply: its slot range and
// its primary; ok is false when it is malformed.
func slotEntry(e valkey.ValkeyMessage) (lo, hi int64, primary []valkey.ValkeyMessage, ok bool) {
	v, err := e.ToArray()
	if err != nil || len(v) < 3 {
		return 0, 0, nil, false
	}
	lo, err1 := v[0].AsInt64()
	hi, err2 := v[1].AsInt64()
	primary, err3 := v[2].ToArray()
	return lo, hi, primary, err1 == nil && err2 == nil && err3 == nil && len(primary) >= 2 && validSlots(lo, hi)
}

// validSlots reports whether [lo, hi] is a range of slots.
func validSlots(lo, hi int64) bool {
	return lo >= 0 && hi >= lo && hi < numSlots
}

// primaryAddr is the address of an entry's primary (host and port), on
// fromHost, the host asked, when the node does not know its own.
func primaryAddr(primary []valkey.ValkeyMessage, fromHost string) (string, error) {
	host, _ := primary[0].ToString()
	port, err := primary[1].AsInt64()
	if err != nil {
		return "", err
	}
	if host == "" || host == "?" { // the node does not know its own address
		host = fromHost
	}
	return net.JoinHostPort(host, strconv.FormatInt(port, 10)), nil
}

// askSlot asks one of the slots n serves (EXISTS on a key that is never
// written) through the cluster client, which routes it to whichever node
// serves the slot now and refreshes its own map when that node fails. It
// reports gone when n serves no slot in the current map.
func (n *node) askSlot(ctx context.Context) (gone bool, err error) {
	e := n.e
	sl, serves := e.slotsOf(n)
	if !serves {
		return true, nil
	}
	n.mu.Lock()
	if n.askKey == "" || n.askOf != sl {
		n.askKey, n.askOf = keyInSlot(sl), sl
	}
	key := n.askKey
	n.mu.Unlock()
	return false, e.client.Do(ctx, e.client.B().Exists().Key(key).Build()).Error()
}

// keyInSlot returns a key of slot sl. The probe reads it to see whether
// the slot answers; nothing is ever written under it.
func keyInSlot(sl uint16) string {
	// About 16384 tries on average; made only by a probe.
	for i := 0; ; i++ {
		k := "sluice:probe:" + strconv.Itoa(i)
		if slot(k) == sl {
			return k
		}
	}
}
