//go:build failover

package failover_test

// The failover suite: one Valkey Cluster of 3 primaries and 3 replicas
// (cluster-node-timeout 1s) with library traffic over all five algorithms,
// failing open and closed, through four changes in turn: a replica killed,
// a graceful CLUSTER FAILOVER, slots resharded, and a primary killed with
// -9. Decisions for the slots of the nodes that are not involved must
// never be degraded; the dead primary's slots follow their fail mode and
// are decided normally again within failoverRecovery of their replica's
// promotion; sluice serve's /readyz is 200 while every slot has a primary
// that answers, and only then.
//
// The suite takes about 15s, so it has its own step in scripts/test.sh:
//
//	go test -race -tags failover -run TestClusterFailover ./cmd/sluice/internal/failover

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/server"
	"github.com/sluicehq/sluice/cmd/sluice/internal/store"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
)

const (
	// clusterTimeout is the limiters' timeout in the failover suite: wider
	// than failTimeout, because the property under test is that a healthy
	// node's decisions are never degraded, and a loaded two-core machine
	// running six servers and -race stalls now and then.
	clusterTimeout = 250 * time.Millisecond
	// failoverRecovery bounds the time from a replica's promotion (every
	// node agrees) to normal decisions on its slots: the client's map
	// refresh (up to a second), the breaker's probe (up to 250ms), and a
	// margin for a loaded machine.
	failoverRecovery = 3 * time.Second
)

// fleet is the failover suite's traffic: ten limiters (five algorithms,
// each failing open and closed) deciding for identities spread over the
// slots, with counts per owner of the identities' slots.
type fleet struct {
	t        *testing.T
	cl       *valkeytest.Cluster
	store    *valkeystore.Store
	limiters []*sluice.Limiter
	prefix   string // of every limiter's keys
	ids      []string

	mu     sync.Mutex
	owner  map[string]string // identity -> address of the primary serving its slot
	counts map[string]*tally // by owner address
	late   time.Time         // the latest degraded decision for the owner watched
	watch  string            // the owner whose degraded decisions late tracks

	stop chan struct{}
	wg   sync.WaitGroup
	n    atomic.Int64
	obs  *errLog
}

type tally struct{ n, degraded int }

func newFleet(t *testing.T, cl *valkeytest.Cluster, s *valkeystore.Store) *fleet {
	f := &fleet{t: t, cl: cl, store: s, stop: make(chan struct{}), obs: &errLog{}}
	prefix := "fo:" + t.Name()
	f.prefix = prefix
	quiet := sluice.WithLogger(discardLogger)
	policies := []sluice.Policy{
		sluice.FixedWindow{Limit: 1e9, Window: time.Minute},
		sluice.SlidingWindow{Limit: 1e9, Window: time.Minute},
		sluice.SlidingLog{Limit: driver.MaxSlidingLogLimit, Window: time.Second},
		sluice.TokenBucket{Capacity: 1e6, Rate: 1e6, Per: time.Second},
		sluice.GCRA{Rate: 1e6, Per: time.Second, Burst: 1e6},
	}
	for i, p := range policies {
		for _, mode := range []sluice.FailMode{sluice.FailOpen, sluice.FailClosed} {
			l, err := sluice.New(s, p, sluice.WithName(fmt.Sprintf("p%d-%s", i, mode)), sluice.WithPrefix(prefix),
				sluice.WithTimeout(clusterTimeout), sluice.WithFailMode(mode), quiet, sluice.WithObserver(f.obs))
			if err != nil {
				t.Fatal(err)
			}
			f.limiters = append(f.limiters, l)
		}
	}
	// 60 identities per primary, and 20 in the slots that the reshard
	// moves (the first 100 slots of the third primary).
	per := map[int]int{}
	moving := 0
	for i := 0; len(f.ids) < 200; i++ {
		id := fmt.Sprintf("u%d", i)
		sl := valkeytest.Slot(driver.Key(f.prefix, f.limiters[0].Name(), f.limiters[0].Rule(), id))
		p := cl.PrimaryOf(sl)
		lo := 2 * 16384 / 3
		switch {
		case p == 2 && sl < lo+reshardSlots && moving < 20:
			moving++
		case per[p] < 60 && !(p == 2 && sl < lo+reshardSlots):
			per[p]++
		default:
			continue
		}
		f.ids = append(f.ids, id)
	}
	f.remap()
	return f
}

const reshardSlots = 100

// remap reads the slot map again: which primary serves each identity.
func (f *fleet) remap() {
	f.t.Helper()
	var live *valkeytest.Server
	for _, s := range append(append([]*valkeytest.Server{}, f.cl.Primaries...), f.cl.Replicas...) {
		if s.Running() {
			live = s
			break
		}
	}
	owner := map[string]string{}
	for _, id := range f.ids {
		o, err := live.Owner(valkeytest.Slot(driver.Key(f.prefix, f.limiters[0].Name(), f.limiters[0].Rule(), id)))
		if err != nil || o == "" {
			f.t.Fatalf("owner of %s: %q, %v", id, o, err)
		}
		owner[id] = o
	}
	f.mu.Lock()
	f.owner = owner
	f.counts = map[string]*tally{}
	f.mu.Unlock()
}

// run starts workers deciding on random identities.
func (f *fleet) run(workers int) {
	for range workers {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for {
				select {
				case <-f.stop:
					return
				default:
				}
				l := f.limiters[rand.IntN(len(f.limiters))]
				id := f.ids[rand.IntN(len(f.ids))]
				res, err := l.Allow(context.Background(), id)
				if err != nil {
					f.t.Errorf("%s: %v", l.Name(), err)
					return
				}
				if res.Degraded && res.Allowed != (l.FailMode() == sluice.FailOpen) {
					f.t.Errorf("%s (fail %s): degraded decision %+v", l.Name(), l.FailMode(), res)
				}
				if !res.Degraded && !res.Allowed {
					f.t.Errorf("%s: refused by the store %+v", l.Name(), res)
				}
				f.n.Add(1)
				f.mu.Lock()
				o := f.owner[id]
				c := f.counts[o]
				if c == nil {
					c = &tally{}
					f.counts[o] = c
				}
				c.n++
				if res.Degraded {
					c.degraded++
					if o == f.watch {
						f.late = time.Now()
					}
				}
				f.mu.Unlock()
				time.Sleep(500 * time.Microsecond) // leave the CPU to the servers
			}
		}()
	}
}

func (f *fleet) halt() {
	close(f.stop)
	f.wg.Wait()
}

// check fails the test for any degraded decision on a primary other than
// those in involved, and returns the counts.
func (f *fleet) check(phase string, involved ...string) string {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for o, c := range f.counts {
		inv := false
		for _, a := range involved {
			inv = inv || a == o
		}
		fmt.Fprintf(&b, " %s: %d decisions, %d degraded;", o, c.n, c.degraded)
		if !inv && c.degraded > 0 {
			f.t.Errorf("%s: %d of %d decisions degraded for the slots of %s, which was not involved (store errors of the phase: %v)", phase, c.degraded, c.n, o, f.obs.summary())
		}
		if c.n == 0 {
			f.t.Errorf("%s: no decisions for %s", phase, o)
		}
	}
	fmt.Fprintf(&b, " errors %v", f.obs.summary())
	f.obs.mu.Lock()
	f.obs.errs = nil
	f.obs.mu.Unlock()
	return b.String()
}

// readyz is a sluice serve HTTP handler on the cluster, for /readyz.
func readyz(t *testing.T, cl *valkeytest.Cluster) *httptest.Server {
	t.Helper()
	opt, err := store.ClientOption(&config.Valkey{Addresses: cl.Addrs, ConnectTimeout: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := store.ConnectValkey(opt, discardLogger, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vs.Close)
	cfg, err := config.Parse("t.yaml", []byte("policies:\n  - {name: a, algorithm: gcra, burst: 5, rate: 5/s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(cfg, server.Options{Store: vs, StoreName: "valkey", Logger: discardLogger})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(ts.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return ts
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not 200 10s after start: %v %v", resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readiness polls sluice serve's /readyz every 20ms until stop, and counts
// 200s and 503s.
func readiness(ts *httptest.Server) (stop func() (ok, failed int, last string)) {
	done := make(chan struct{})
	var ok, failed int
	var last string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			resp, err := http.Get(ts.URL + "/readyz")
			switch {
			case err != nil:
				failed++
				last = err.Error()
			case resp.StatusCode == 200:
				ok++
			default:
				failed++
				b, _ := io.ReadAll(resp.Body)
				last = fmt.Sprintf("%d %s", resp.StatusCode, b)
			}
			if resp != nil {
				resp.Body.Close()
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() (int, int, string) {
		close(done)
		wg.Wait()
		return ok, failed, last
	}
}

func TestClusterFailover(t *testing.T) {
	cl := valkeytest.StartCluster(t, 3, valkeytest.WithReplicas(1), valkeytest.WithArgs("--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no"))
	s, err := valkeystore.New(cl.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	rz := readyz(t, cl)
	f := newFleet(t, cl, s)
	f.run(8)
	defer f.halt()
	p, r := cl.Primaries, cl.Replicas // r[i] replicates p[i]

	// A replica dies: nothing is degraded, and the store stays ready.
	t.Run("replica-killed", func(t *testing.T) {
		f.remap()
		ready := readiness(rz)
		time.Sleep(200 * time.Millisecond)
		r[2].Kill(t)
		time.Sleep(1500 * time.Millisecond) // past the node timeout: the others mark it failed
		ok, failed, last := ready()
		if failed > 0 {
			t.Errorf("/readyz failed %d times of %d with only a replica lost: %v", failed, ok+failed, last)
		}
		t.Logf("replica %s killed:%s ready %d of %d", r[2].Addr, f.check("replica-killed"), ok, ok+failed)
	})

	// CLUSTER FAILOVER: the replica of the second primary takes over.
	t.Run("failover", func(t *testing.T) {
		f.remap()
		took := cl.Failover(t, r[1], 16384/3)
		time.Sleep(300 * time.Millisecond)
		t.Logf("CLUSTER FAILOVER %s -> %s in %v:%s", p[1].Addr, r[1].Addr, took, f.check("failover", p[1].Addr))
	})

	// A reshard under traffic: the first 100 slots of the third primary
	// move, with their keys, to the first.
	t.Run("reshard", func(t *testing.T) {
		f.remap()
		lo := 2 * 16384 / 3
		begin := time.Now()
		cl.MoveSlots(t, p[2], p[0], lo, lo+reshardSlots-1)
		took := time.Since(begin)
		time.Sleep(200 * time.Millisecond)
		t.Logf("%d slots moved in %v:%s", reshardSlots, took, f.check("reshard", p[2].Addr, p[0].Addr))
	})

	// A primary killed with -9: only its slots are degraded, by their fail
	// mode, until its replica is promoted; readiness fails meanwhile and
	// comes back.
	t.Run("primary-killed", func(t *testing.T) {
		f.remap()
		f.mu.Lock()
		f.watch = p[0].Addr
		f.mu.Unlock()
		ready := readiness(rz)
		time.Sleep(200 * time.Millisecond)
		killed := time.Now()
		p[0].Kill(t)
		cl.WaitOwner(t, 0, r[0], 20*time.Second)
		promoted := time.Now()
		// Traffic for a while after the promotion, then the last degraded
		// decision for the dead primary's slots must be within the bound.
		time.Sleep(failoverRecovery + 500*time.Millisecond)
		ok, failed, last := ready()
		f.mu.Lock()
		late := f.late
		f.mu.Unlock()
		stats := f.check("primary-killed", p[0].Addr)
		if late.IsZero() {
			t.Errorf("no degraded decision for the dead primary's slots: was it serving traffic?")
		}
		if d := late.Sub(promoted); d > failoverRecovery {
			t.Errorf("decisions for the dead primary's slots degraded until %v after its replica's promotion, want within %v", d, failoverRecovery)
		}
		if failed == 0 {
			t.Errorf("/readyz never failed while a primary was dead")
		}
		resp, err := http.Get(rz.URL + "/readyz")
		if err != nil || resp.StatusCode != 200 {
			t.Errorf("/readyz after the promotion: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}
		if st := s.BreakerState(); st != valkeystore.BreakerClosed {
			t.Errorf("breakers %v after the promotion, want all closed (the dead primary's closes when its slots answer)", s.Breakers())
		}
		t.Logf("primary %s killed; replica %s promoted %v later; last degraded decision %v after the promotion;%s /readyz failed %d of %d (last: %v); breakers %v",
			p[0].Addr, r[0].Addr, promoted.Sub(killed), late.Sub(promoted), stats, failed, ok+failed, last, s.Breakers())
	})
	t.Logf("%d decisions in all", f.n.Load())
}
