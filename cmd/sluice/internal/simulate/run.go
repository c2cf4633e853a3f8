package simulate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
)

// Result is what a simulation decided, bucket by bucket.
type Result struct {
	Start    time.Time
	Duration time.Duration
	Bucket   time.Duration
	// Watch is the key whose remaining units each bucket records.
	Watch string
	// Traffic describes the traffic, for titles.
	Traffic  []string
	Policies []*PolicyResult
}

// PolicyResult is one policy's part of a Result.
type PolicyResult struct {
	Name   string
	Rule   sluice.Rule
	Shadow bool
	// Nominal is the policy's long-run rate, units per second.
	Nominal float64
	// RateWindow is the span Bucket.Admitted is measured over.
	RateWindow time.Duration
	Buckets    []Bucket
	// Totals over the run.
	Requests, Allowed, Refused int64
	// Keys is the number of distinct keys that sent requests in the run.
	Keys int64
	// An in_flight policy's leases: released by their holders (and
	// releases that found their lease ended already), taken by holders
	// that crashed (each ends Lease after it was acquired), renewals that
	// found their lease ended.
	Released, ReleasedEnded, Crashed, RenewalsLost int64
}

// InFlight reports whether the policy is in_flight (its buckets count
// leases held; it has no nominal rate).
func (p *PolicyResult) InFlight() bool { return p.Rule.Algorithm == driver.AlgorithmInFlight }

// Bucket counts the decisions of one policy in one span of time,
// [Start+i×Bucket, Start+(i+1)×Bucket).
type Bucket struct {
	Requests, Allowed, Refused int64
	// AllowedUnits is the units taken by the allowed requests.
	AllowedUnits int64
	// Remaining is the watched key's remaining units at the end of the
	// bucket (a peek, which takes nothing).
	Remaining int64
	// Admitted is the rate at which units were allowed, per second, to
	// all keys together, over the RateWindow that ends with this bucket:
	// the units allowed in it divided by the whole window, from the start
	// too (nothing was admitted before the start), so that the first
	// buckets show no spike of a rate over a shorter span.
	Admitted float64
	// Keys is the number of distinct keys that sent requests in that
	// window: the policy admits at most about Keys × Nominal per second
	// to them together (each key has its own limit).
	Keys int64
	// For an in_flight policy: Held is the leases held at the end of the
	// bucket, all keys together, Crashed those of them held by crashed
	// holders (not yet ended), and Peak the most leases any one key held
	// at once in the bucket, as the store counted them after each
	// acquire. (Remaining is the watched key's free slots.)
	Held, Crashed, Peak int64
}

// Run simulates the plan: each policy on its own in-process store, with a
// simulated clock, the policies in parallel (one after the other when a
// decision log is written, so that each policy's decisions are in time
// order in it).
func (p *Plan) Run(ctx context.Context) (*Result, error) {
	res := &Result{Start: p.Start, Duration: p.Duration, Bucket: p.Bucket, Watch: p.Watch, Traffic: p.trafficSpecs()}
	workers := make([]*worker, len(p.opts.Policies))
	for i, pol := range p.opts.Policies {
		w, err := p.newWorker(pol)
		if err != nil {
			return nil, err
		}
		workers[i] = w
		res.Policies = append(res.Policies, w.res)
	}
	fleets, err := p.fleetWorkers()
	if err != nil {
		return nil, err
	}
	for _, w := range fleets {
		defer w.fleet.close()
		workers = append(workers, w)
		res.Policies = append(res.Policies, w.res)
	}
	if err := p.runAll(ctx, workers); err != nil {
		return nil, err
	}
	return res, nil
}

// runAll runs the workers in parallel, or one after the other when a
// decision log is written, which it then flushes.
func (p *Plan) runAll(ctx context.Context, workers []*worker) error {
	if p.opts.Decisions == nil {
		return runWorkers(ctx, workers, runtime.GOMAXPROCS(0), nil)
	}
	log := &decisionLog{w: p.opts.Decisions}
	if err := runWorkers(ctx, workers, 1, log); err != nil {
		return err
	}
	if err := log.flush(); err != nil {
		return fmt.Errorf("decision log: %w", err)
	}
	return nil
}

// trafficSpecs describes the plan's traffic for the result: each
// generator's spec, then the trace file's name.
func (p *Plan) trafficSpecs() []string {
	var specs []string
	for _, t := range p.opts.Traffic {
		specs = append(specs, t.Spec)
	}
	if p.opts.Trace != "" {
		specs = append(specs, "trace "+p.opts.Trace)
	}
	return specs
}

// runWorkers runs the workers, at most parallel at a time, each writing
// its decisions to log (nil for none). The first to fail stops the rest;
// the errors of all are returned joined.
func runWorkers(ctx context.Context, workers []*worker, parallel int, log *decisionLog) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, parallel)
	errs := make([]error, len(workers))
	var wg sync.WaitGroup
	for i, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			defer func() { <-sem }()
			w.log = log
			if errs[i] = w.run(ctx); errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// worker simulates one policy.
type worker struct {
	plan  *Plan
	pol   *config.Policy
	rule  sluice.Rule
	store *memstore.Store
	now   time.Time
	ops   [1]driver.Op
	// storeKeys[i] is the store key of the plan's key i.
	storeKeys []string
	watchKey  string
	res       *PolicyResult
	log       *decisionLog
	// lf simulates the holders of an in_flight policy (nil for a rate
	// policy).
	lf *leaseSim
	// fleet, for a policy with grants, is the processes deciding it
	// (grants.go); nil for the exact policy.
	fleet *grantFleet
}

func (p *Plan) newWorker(pol *config.Policy) (*worker, error) {
	rule, err := pol.Policy.Rule()
	if err != nil {
		return nil, fmt.Errorf("policy %q: %w", pol.Name, err)
	}
	w := &worker{plan: p, pol: pol, rule: rule}
	w.store = memstore.New(memstore.WithClock(func() time.Time { return w.now }))
	w.storeKeys = make([]string, len(p.keys))
	for i, k := range p.keys {
		w.storeKeys[i] = w.key(k)
	}
	w.watchKey = w.key(p.Watch)
	rw := p.opts.RateWindow
	if rw == 0 {
		rw = rule.Period()
	}
	w.res = &PolicyResult{
		Name:       pol.Name,
		Rule:       rule,
		Shadow:     pol.Shadow,
		Nominal:    NominalRate(rule),
		RateWindow: roundUp(rw, p.Bucket),
		Buckets:    make([]Bucket, p.Buckets),
	}
	if w.res.InFlight() {
		w.lf = newLeaseSim(w)
		w.res.Nominal = 0
	}
	return w, nil
}

// key is the store key of identity under the worker's policy.
func (w *worker) key(identity string) string {
	return driver.Key(sluice.DefaultPrefix, w.pol.Limiter, w.rule, identity)
}

// decide runs one decision on the store at at microseconds from the start.
// Cost 0 peeks.
func (w *worker) decide(at int64, key string, cost int64) (sluice.Result, error) {
	w.now = w.plan.Start.Add(time.Duration(at) * time.Microsecond)
	if w.fleet != nil {
		w.fleet.setNow(w.now)
		return w.fleet.decide(key, cost)
	}
	w.ops[0] = driver.Op{Key: key, Rule: w.rule, Cost: cost, Now: w.now}
	if err := w.store.Do(context.Background(), w.ops[:]); err != nil {
		return sluice.Result{}, err
	}
	if err := w.ops[0].Err; err != nil {
		return sluice.Result{}, fmt.Errorf("policy %q: %w", w.pol.Name, err)
	}
	// The store's decision, as the store gives it (no limit or source).
	r := w.ops[0].Result
	return sluice.Result{Allowed: r.Allowed, Remaining: r.Remaining, RetryAfter: r.RetryAfter, ResetAfter: r.ResetAfter}, nil
}

func (w *worker) sources() ([]source, func(), error) {
	p := w.plan
	var srcs []source
	for i, t := range p.opts.Traffic {
		srcs = append(srcs, newSynthetic(t, p.srcKeys[i], p.opts.Seed, i, p.Duration))
	}
	closeFn := func() {}
	if p.opts.Trace != "" {
		ts, err := openTrace(p.opts.Trace, w.pol.Name, p.Start, p.traceAbs)
		if err != nil {
			return nil, nil, err
		}
		srcs = append(srcs, ts)
		closeFn = ts.close
	}
	return srcs, closeFn, nil
}

// run decides the events of every source in time order, closing each
// bucket as time passes its end, and then the buckets after the last
// event.
func (w *worker) run(ctx context.Context) error {
	srcs, closeFn, err := w.sources()
	if err != nil {
		return err
	}
	defer closeFn()
	p := w.plan
	cur := bucketCursor{width: p.Bucket.Microseconds(), runEnd: p.Duration.Microseconds()}
	cur.end = cur.width
	keys := w.newKeyWindows()
	if err := w.decideAll(ctx, srcs, &cur, keys); err != nil {
		return err
	}
	if err := traceError(srcs); err != nil {
		return err
	}
	for cur.b < len(w.res.Buckets) {
		if err := w.closeBucket(&cur); err != nil {
			return err
		}
	}
	w.finish(keys)
	return nil
}

// decideAll decides the events of srcs in time order until they run out
// or reach the run's end, closing each bucket the next event is past.
// It checks ctx every 65536 events.
func (w *worker) decideAll(ctx context.Context, srcs []source, cur *bucketCursor, keys *keyWindows) error {
	for n := 0; ; n++ {
		if n&0xffff == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		best, bt := nextSource(srcs)
		if best < 0 || bt >= cur.runEnd {
			return nil
		}
		if err := w.decideNext(srcs[best], bt, cur, keys); err != nil {
			return err
		}
	}
}

// decideNext closes the buckets that end by bt, the time of src's next
// event, then decides that event and lets src observe the result.
func (w *worker) decideNext(src source, bt int64, cur *bucketCursor, keys *keyWindows) error {
	for bt >= cur.end {
		if err := w.closeBucket(cur); err != nil {
			return err
		}
	}
	if w.lf != nil { // releases at bt come before arrivals at bt
		if err := w.lf.until(bt, true); err != nil {
			return err
		}
	}
	r, err := w.decideEvent(src.pop(), cur.b, keys)
	if err != nil {
		return err
	}
	src.observe(r)
	return nil
}

// traceError returns the first read error a trace source met, which
// ended its events early.
func traceError(srcs []source) error {
	for _, s := range srcs {
		if ts, ok := s.(*traceSource); ok && ts.err != nil {
			return ts.err
		}
	}
	return nil
}

// bucketCursor is the bucket a run is in: its number and where it ends,
// in microseconds from the start.
type bucketCursor struct {
	b                  int
	end, width, runEnd int64
}

// nextSource returns the source whose next event is the earliest, and
// that event's time; -1 when every source is done.
func nextSource(srcs []source) (int, int64) {
	best, bt := -1, int64(0)
	for i, s := range srcs {
		if t, ok := s.peek(); ok && (best < 0 || t < bt) {
			best, bt = i, t
		}
	}
	return best, bt
}

// closeBucket records the watched key's remaining units at the end of the
// current bucket (at most the end of the run) and moves to the next.
func (w *worker) closeBucket(cur *bucketCursor) error {
	end := min(cur.end, cur.runEnd)
	if w.lf != nil {
		if err := w.lf.until(end, false); err != nil {
			return err
		}
		w.lf.closeBucket(end, cur.b)
	}
	r, err := w.decide(end, w.watchKey, 0)
	if err != nil {
		return err
	}
	w.res.Buckets[cur.b].Remaining = r.Remaining
	cur.b++
	cur.end += cur.width
	return nil
}

// decideEvent decides ev in bucket b, counts it there (and its key among
// the keys of the rate window), and logs the decision when asked to.
func (w *worker) decideEvent(ev event, b int, keys *keyWindows) (sluice.Result, error) {
	key := w.eventKey(ev)
	r, err := w.decideOne(ev, key, b)
	if err != nil {
		return r, err
	}
	keys.seen(key, b)
	w.res.Buckets[b].count(r.Allowed, ev.cost)
	if w.log == nil || w.fleet != nil { // the log holds the exact policy's decisions
		return r, nil
	}
	if err := w.log.write(w.now, w.pol.Name, w.plan.eventName(ev), ev.cost, r.Allowed); err != nil {
		return r, fmt.Errorf("decision log: %w", err)
	}
	return r, nil
}

// decideOne decides ev on key in bucket b: a rate decision, or an
// in_flight policy's acquire.
func (w *worker) decideOne(ev event, key string, b int) (sluice.Result, error) {
	if w.lf == nil {
		return w.decide(ev.at, key, ev.cost)
	}
	r, err := w.lf.acquire(ev, key, b)
	return sluice.Result{Allowed: r.Allowed, Remaining: r.Remaining, RetryAfter: r.RetryAfter, ResetAfter: r.ResetAfter}, err
}

// eventKey is the store key of ev's key: prepared for a synthetic
// source's, made for a trace's.
func (w *worker) eventKey(ev event) string {
	if ev.key >= 0 {
		return w.storeKeys[ev.key]
	}
	if w.fleet != nil {
		return ev.name
	}
	return w.key(ev.name)
}

// eventName is the name of ev's key, as the decision log records it.
func (p *Plan) eventName(ev event) string {
	if ev.key >= 0 {
		return p.keys[ev.key]
	}
	return ev.name
}

// count counts a request of cost in the bucket, allowed or refused.
func (bk *Bucket) count(allowed bool, cost int64) {
	bk.Requests++
	if allowed {
		bk.Allowed++
		bk.AllowedUnits += cost
	} else {
		bk.Refused++
	}
}

// keyWindows counts, for each bucket, the distinct keys that sent
// requests in the rate window ending with it: a key seen in bucket b is in
// the windows ending at b to b+k-1, which a difference array over the
// buckets records in constant work per request.
type keyWindows struct {
	k    int
	last map[string]int // the bucket each key was last seen in
	diff []int64        // len(buckets)+1
}

func (w *worker) newKeyWindows() *keyWindows {
	return &keyWindows{k: w.rateBuckets(), last: map[string]int{}, diff: make([]int64, len(w.res.Buckets)+1)}
}

// seen records a request of key in bucket b.
func (kw *keyWindows) seen(key string, b int) {
	from := b
	if l, ok := kw.last[key]; ok {
		if l == b {
			return
		}
		from = max(b, l+kw.k) // the windows up to l+k-1 count it already
	}
	kw.last[key] = b
	to := min(b+kw.k, len(kw.diff)-1) // exclusive
	if from < to {
		kw.diff[from]++
		kw.diff[to]--
	}
}

// rateBuckets is the number of buckets in the rate window.
func (w *worker) rateBuckets() int { return int(w.res.RateWindow / w.plan.Bucket) }

// finish adds the totals, the admitted rate over the rate window and the
// keys in it.
func (w *worker) finish(keys *keyWindows) {
	res := w.res
	k := w.rateBuckets()
	var sum, active int64
	for i := range res.Buckets {
		bk := &res.Buckets[i]
		res.Requests += bk.Requests
		res.Allowed += bk.Allowed
		res.Refused += bk.Refused
		sum += bk.AllowedUnits
		if i >= k {
			sum -= res.Buckets[i-k].AllowedUnits
		}
		bk.Admitted = float64(sum) / res.RateWindow.Seconds()
		active += keys.diff[i]
		bk.Keys = active
	}
	res.Keys = int64(len(keys.last))
}

// traceSource reads a trace's requests for one policy.
type traceSource struct {
	f      *os.File
	rd     *Reader
	policy string
	start  time.Time
	abs    bool
	next   event
	has    bool
	done   bool
	err    error
}

func openTrace(name, policy string, start time.Time, abs bool) (*traceSource, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	rd, err := NewReader(f, name, false)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &traceSource{f: f, rd: rd, policy: policy, start: start, abs: abs}, nil
}

func (t *traceSource) close() { t.f.Close() }

func (t *traceSource) peek() (int64, bool) {
	for !t.has && !t.done {
		t.readNext()
	}
	return t.next.at, t.has
}

// readNext reads the trace's next record: the next event when it is for
// t's policy (or every policy), or the end of the trace, keeping the
// error that ended it early.
func (t *traceSource) readNext() {
	rec, err := t.rd.Next()
	if err != nil {
		t.err = endOfRecords(err)
		t.done = true
		return
	}
	if rec.Policy != "" && rec.Policy != t.policy {
		return
	}
	t.next = event{at: rec.since(t.start).Microseconds(), key: -1, name: rec.Key, cost: rec.Cost}
	t.has = true
}

func (t *traceSource) pop() event {
	t.has = false
	return t.next
}

func (t *traceSource) observe(sluice.Result) {}
