package simulate

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
)

// A policy with grants (grants: auto) is simulated twice on the same
// traffic: as the exact policy on one key per identity (the policy's own
// worker), and as a fleet of Options.Processes processes, each a real
// sluice.Limiter WithGrants on one in-process store under the simulated
// clock, the requests dealt to them in turn. The fleet's result is named
// "NAME (grants, N processes)", so that the picture draws what the fleet
// admitted against what the exact policy admits.
//
// The limiters' grant calls run in their own goroutines, as in sluice
// serve; before each decision the simulation waits until every call begun
// has returned, so that a call takes no simulated time. The limiters'
// sweepers run on the machine's clock, not the simulated one: a quiet
// key's units come back at its next renewal or when its grant ends, which
// the simulated time reaches sooner than a sweep.

// maxProcesses bounds Options.Processes.
const maxProcesses = 1000

// fleetName is the name of the result of pol's fleet of n processes.
func fleetName(pol *config.Policy, n int) string {
	return fmt.Sprintf("%s (grants, %d processes)", pol.Name, n)
}

// grantFleet is the processes of a fleet and the store they share.
type grantFleet struct {
	procs []*sluice.Limiter
	store *countingStore
	next  int
	// now is the simulated time, read by the limiters' grant calls, which
	// run on goroutines of their own (worker.now is the worker's alone).
	now atomic.Pointer[time.Time]
}

// setNow sets the time the fleet's limiters and store read.
func (f *grantFleet) setNow(t time.Time) { f.now.Store(&t) }

// countingStore is the in-process store, counting the grant calls that
// have returned.
type countingStore struct {
	*memstore.Store
	done atomic.Int64
}

func (s *countingStore) Grant(ctx context.Context, batch []driver.GrantOp) error {
	defer s.done.Add(1)
	return s.Store.Grant(ctx, batch)
}

// newFleet makes w's fleet of n limiters of pol on one store under w's
// clock.
func (w *worker) newFleet(pol *config.Policy, n int) error {
	f := &grantFleet{}
	f.setNow(w.now)
	clock := func() time.Time { return *f.now.Load() }
	f.store = &countingStore{Store: memstore.New(memstore.WithClock(clock))}
	for range n {
		l, err := sluice.New(f.store, pol.Policy, sluice.WithName(pol.Limiter), sluice.WithClock(clock),
			sluice.WithGrants(pol.GrantOptions), sluice.WithTimeout(time.Minute), sluice.WithDenyCache(false))
		if err != nil {
			return fmt.Errorf("policy %q: %w", pol.Name, err)
		}
		f.procs = append(f.procs, l)
	}
	w.fleet = f
	return nil
}

// settle waits until every grant call the fleet began has returned.
func (f *grantFleet) settle() {
	for {
		var calls int64
		for _, l := range f.procs {
			calls += l.GrantStats().Calls
		}
		if f.store.done.Load() >= calls {
			return
		}
		runtime.Gosched()
	}
}

// decide decides cost for identity on the next process in turn; a peek
// (cost 0) decides nothing: a process's peek would take a grant.
func (f *grantFleet) decide(identity string, cost int64) (sluice.Result, error) {
	if cost == 0 {
		return sluice.Result{}, nil
	}
	f.settle()
	l := f.procs[f.next]
	f.next = (f.next + 1) % len(f.procs)
	return l.AllowN(context.Background(), identity, cost)
}

// close gives the fleet's units back and stops its limiters' sweepers.
func (f *grantFleet) close() {
	f.settle()
	for _, l := range f.procs {
		l.Close()
	}
}

// fleetWorkers are the workers of the fleets of p's policies with grants.
func (p *Plan) fleetWorkers() ([]*worker, error) {
	var out []*worker
	n := max(1, p.opts.Processes)
	for _, pol := range p.opts.Policies {
		if !pol.Grants {
			continue
		}
		w, err := p.newWorker(pol)
		if err != nil {
			return nil, err
		}
		if err := w.newFleet(pol, n); err != nil {
			return nil, err
		}
		w.res.Name = fleetName(pol, n)
		for i, k := range p.keys {
			w.storeKeys[i] = k // the fleet's limiters take identities
		}
		out = append(out, w)
	}
	return out, nil
}
