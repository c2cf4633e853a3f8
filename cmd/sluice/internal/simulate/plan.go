// Package simulate is sluice simulate: it runs policies on the in-process
// store under a simulated clock, over synthetic traffic or a trace of
// requests, and reports what each decided, bucket by bucket, as numbers
// (CSV) and pictures (SVG, PNG). Replay re-decides a decision log under a
// changed configuration and reports the decisions that would flip.
package simulate

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/driver"
)

// DefaultStart is where a simulation starts when its times are offsets: a
// midnight UTC, so every window of up to a day starts with it.
var DefaultStart = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)

// Defaults and bounds of Options.
const (
	// DefaultDuration is the length of a run without a trace and without
	// --duration.
	DefaultDuration = 10 * time.Second
	// MaxDuration is the longest run (the policies' own longest window).
	MaxDuration = driver.MaxWindow
	// DefaultMaxDecisions bounds a run's decisions, about 40 seconds of
	// work on one core.
	DefaultMaxDecisions = 200_000_000
	// MaxBuckets bounds the buckets of a run (each is a row of the CSV and
	// a step of the pictures).
	MaxBuckets = 100_000
	// targetBuckets is about how many buckets an automatic bucket size
	// gives.
	targetBuckets = 300
)

// Options describe a simulation.
type Options struct {
	// Policies to run side by side, each on its own state, on the same
	// traffic.
	Policies []*config.Policy
	// Traffic are synthetic sources; Trace names a file of requests (see
	// Record). At least one of them.
	Traffic []Traffic
	Trace   string
	// Duration of the run (default: to the end of the trace, or
	// DefaultDuration).
	Duration time.Duration
	// Bucket is the width of a time bucket (default: about 300 buckets).
	Bucket time.Duration
	// RateWindow is the span over which the admitted rate is measured
	// (default: each policy's period, the time a fully used limit takes
	// to be restored), rounded up to whole buckets.
	RateWindow time.Duration
	// Seed makes Poisson traffic and random keys repeatable.
	Seed uint64
	// Watch is the key whose remaining units are recorded at the end of
	// each bucket (default: the first source's first key).
	Watch string
	// MaxDecisions refuses runs that would make more decisions (default
	// DefaultMaxDecisions).
	MaxDecisions int64
	// Decisions, when set, receives every decision as a decision log
	// (JSON lines; see Record), which Replay reads.
	Decisions io.Writer
	// Processes is the number of processes a policy with grants is
	// simulated over, beside the exact policy (grants.go; default 1).
	Processes int
}

// TooLongError is returned, before anything runs, for a run that would
// make more decisions than allowed.
type TooLongError struct {
	Decisions, Max int64
	Policies       int
	Duration       time.Duration
}

func (e *TooLongError) Error() string {
	return fmt.Sprintf("this run would make about %d decisions (%d policies over %v), about %v of work at ~%v each; "+
		"the limit is %d (--max-decisions): shorten --duration, lower the rates, simulate fewer policies at once, or raise --max-decisions",
		e.Decisions, e.Policies, e.Duration, estimateTime(e.Decisions).Round(time.Second), costPerDecision, e.Max)
}

// costPerDecision is a rough cost of one simulated decision on one core,
// for the estimate shown up front.
const costPerDecision = 200 * time.Nanosecond

func estimateTime(decisions int64) time.Duration {
	return time.Duration(decisions) * costPerDecision
}

// ErrNoTraffic is returned when there is nothing to simulate.
var ErrNoTraffic = errors.New("no traffic: give --traffic or --trace")

// Plan is a validated simulation, with its size known before it runs.
type Plan struct {
	opts     Options
	Start    time.Time
	Duration time.Duration
	Bucket   time.Duration
	Buckets  int
	// Requests is about how many requests each policy sees (exactly, for
	// steady traffic, bursts and traces).
	Requests []int64
	// Decisions is the estimated total, over all policies.
	Decisions int64
	// Watch is the key whose remaining units are recorded.
	Watch string
	// keys are the synthetic sources' keys; srcKeys[i] indexes those of
	// source i.
	keys    []string
	srcKeys [][]int32
	// trace facts from the scan.
	traceAbs bool
}

// NewPlan validates opts, reads the trace once (reporting a malformed line
// with its number), and sizes the run. It returns a *TooLongError, before
// any work, when the run would be too long.
func NewPlan(opts Options) (*Plan, error) {
	if err := checkOptions(&opts); err != nil {
		return nil, err
	}
	if err := checkInFlight(opts); err != nil {
		return nil, err
	}
	p := &Plan{opts: opts, Start: DefaultStart, Requests: make([]int64, len(opts.Policies))}
	if err := p.addSources(opts.Traffic, opts.Policies); err != nil {
		return nil, err
	}
	traceEnd, traceCounts, err := p.readTrace(opts)
	if err != nil {
		return nil, err
	}
	p.Watch = p.watchKey(opts.Watch)
	if err := p.size(opts, traceEnd); err != nil {
		return nil, err
	}
	p.count(opts.Traffic, traceCounts)
	for i, pol := range opts.Policies {
		if pol.Grants {
			p.Decisions += p.Requests[i] // its fleet decides the same requests
		}
	}
	if opts.Processes < 0 || opts.Processes > maxProcesses {
		return nil, fmt.Errorf("--processes: want 1 to %d, got %d", maxProcesses, opts.Processes)
	}
	if p.Decisions > opts.MaxDecisions {
		return nil, &TooLongError{Decisions: p.Decisions, Max: opts.MaxDecisions, Policies: len(opts.Policies), Duration: p.Duration}
	}
	return p, nil
}

// readTrace scans the trace, when there is one, and returns its last
// request's offset and each policy's requests in it (nil without a
// trace); without a trace, it checks that a source uses the watched key.
func (p *Plan) readTrace(opts Options) (time.Duration, []int64, error) {
	if opts.Trace == "" {
		if opts.Watch != "" && !p.hasKey(opts.Watch) {
			return 0, nil, fmt.Errorf("--watch %q: no request uses this key (the sources' keys are %v)", opts.Watch, p.keyList(5))
		}
		return 0, nil, nil
	}
	scan, err := scanTrace(opts.Trace, opts.Policies)
	if err != nil {
		return 0, nil, err
	}
	end, err := p.useTrace(scan, opts)
	return end, scan.counts, err
}

// watchKey returns the key the run watches: the one asked for, or else
// the first key of the synthetic sources, or else the one the trace chose
// (useTrace: its first record's), if any.
func (p *Plan) watchKey(asked string) string {
	if asked != "" {
		return asked
	}
	if len(p.keys) > 0 {
		return p.keys[0]
	}
	return p.Watch
}

// checkOptions refuses options that cannot run (no policies or traffic,
// a policy twice, a duration out of range) and fills in the default
// decision bound.
func checkOptions(opts *Options) error {
	if len(opts.Policies) == 0 {
		return errors.New("no policies: give --config or --policy")
	}
	if len(opts.Traffic) == 0 && opts.Trace == "" {
		return ErrNoTraffic
	}
	if err := uniquePolicies(opts.Policies); err != nil {
		return err
	}
	if opts.MaxDecisions == 0 {
		opts.MaxDecisions = DefaultMaxDecisions
	}
	return checkDuration(opts.Duration)
}

// uniquePolicies refuses a policy name given twice.
func uniquePolicies(policies []*config.Policy) error {
	seen := map[string]bool{}
	for _, p := range policies {
		if seen[p.Name] {
			return fmt.Errorf("policy %q is given twice", p.Name)
		}
		seen[p.Name] = true
	}
	return nil
}

// checkDuration refuses a --duration out of range (0 is the default).
func checkDuration(d time.Duration) error {
	if d < 0 || d > MaxDuration {
		return fmt.Errorf("--duration must be between 1ms and %v, got %v", MaxDuration, d)
	}
	return nil
}

// addSources names the keys of each synthetic source, refusing a cost
// that some policy could never allow.
func (p *Plan) addSources(traffic []Traffic, policies []*config.Policy) error {
	for _, t := range traffic {
		if err := t.checkCost(policies); err != nil {
			return err
		}
		p.srcKeys = append(p.srcKeys, p.addKeys(t))
	}
	return nil
}

// checkCost refuses a cost of t that one of policies could never allow.
func (t *Traffic) checkCost(policies []*config.Policy) error {
	for _, pol := range policies {
		if t.Cost > pol.Limit {
			return fmt.Errorf("traffic %q: cost %d exceeds the limit %d of policy %q: it could never be allowed", t.Spec, t.Cost, pol.Limit, pol.Name)
		}
	}
	return nil
}

// addKeys names the keys of source t (its key, or key-0, key-1, ... for
// several) and returns their indexes in p.keys.
func (p *Plan) addKeys(t Traffic) []int32 {
	var idx []int32
	for k := 0; k < t.Keys; k++ {
		name := t.Key
		if t.Keys > 1 {
			name = fmt.Sprintf("%s-%d", t.Key, k)
		}
		idx = append(idx, int32(len(p.keys)))
		p.keys = append(p.keys, name)
	}
	return idx
}

// useTrace takes the start (of a trace of absolute times) and the watched
// key from the trace's scan, and returns the last request's offset.
func (p *Plan) useTrace(scan *traceScan, opts Options) (time.Duration, error) {
	var end time.Duration
	if scan.abs {
		p.traceAbs = true
		p.Start = scan.first.Truncate(time.Second)
		end = scan.last.Sub(p.Start)
	} else {
		end = scan.lastOffset
	}
	if len(opts.Traffic) == 0 {
		p.Watch = scan.firstKey
	}
	if !p.usesKey(scan, opts.Watch) {
		return 0, fmt.Errorf("--watch %q: no request uses this key", opts.Watch)
	}
	return end, nil
}

// usesKey reports whether the watched key (none: "") may be used, by the
// trace or by a source; a trace with more keys than its scan keeps may use
// any.
func (p *Plan) usesKey(scan *traceScan, watch string) bool {
	return watch == "" || scan.keys[watch] || len(scan.keys) >= maxScanKeys || p.hasKey(watch)
}

// size sets the run's duration (by default, up to the trace's last
// request) and its buckets.
func (p *Plan) size(opts Options, traceEnd time.Duration) error {
	p.Duration = opts.Duration
	if p.Duration == 0 {
		p.Duration = DefaultDuration
		if opts.Trace != "" {
			// Up to the last request, in whole seconds.
			p.Duration = roundUp(traceEnd+time.Microsecond, time.Second)
		}
	}
	if p.Duration > MaxDuration {
		return fmt.Errorf("the trace spans %v, more than the longest run, %v", p.Duration, MaxDuration)
	}
	p.Bucket = opts.Bucket
	if p.Bucket == 0 {
		p.Bucket = autoBucket(p.Duration)
	}
	if p.Bucket < time.Millisecond || p.Bucket%time.Microsecond != 0 {
		return fmt.Errorf("--bucket must be at least 1ms and a whole number of microseconds, got %v", p.Bucket)
	}
	nb := int64(math.Ceil(float64(p.Duration) / float64(p.Bucket)))
	if nb > MaxBuckets {
		return fmt.Errorf("%v in buckets of %v is %d buckets, more than %d: use a wider --bucket", p.Duration, p.Bucket, nb, MaxBuckets)
	}
	p.Buckets = int(nb)
	return nil
}

// count estimates the requests each policy sees (traceCounts: those of
// the trace, nil without one) and the decisions of the whole run.
func (p *Plan) count(traffic []Traffic, traceCounts []int64) {
	var total int64
	for i := range p.Requests {
		var n float64
		for _, t := range traffic {
			n += t.Expected(p.Duration)
		}
		if traceCounts != nil {
			n += float64(traceCounts[i])
		}
		p.Requests[i] = int64(math.Ceil(n))
		total += p.Requests[i] + int64(p.Buckets)
		if pol := p.opts.Policies[i]; pol.Algorithm == driver.AlgorithmInFlight {
			total += p.Requests[i] // a release for each acquire
			total += p.renewals(pol, traffic)
		}
	}
	p.Decisions = total
}

// renewals estimates the lease renewals of in_flight policy pol: each
// request renews every third of the lease while its hold lasts (about its
// mean hold, clipped to the run, over a third of the lease, less half a
// renewal), and no more leases than the limit are held at once.
func (p *Plan) renewals(pol *config.Policy, traffic []Traffic) int64 {
	rule, err := pol.Policy.Rule()
	if err != nil || rule.Window <= 0 {
		return 0
	}
	every := float64(max(rule.Window/3, time.Microsecond))
	var n float64
	for _, t := range traffic {
		n += t.Expected(p.Duration) * max(0, float64(min(t.Hold.mean(), p.Duration))/every-0.5)
	}
	n = min(n, float64(rule.Limit)*float64(p.Duration)/every)
	return int64(math.Ceil(n))
}

// Estimate is the rough time the run takes on one core.
func (p *Plan) Estimate() time.Duration { return estimateTime(p.Decisions) }

func (p *Plan) hasKey(k string) bool {
	for _, x := range p.keys {
		if x == k {
			return true
		}
	}
	return false
}

func (p *Plan) keyList(n int) []string {
	if len(p.keys) < n {
		return p.keys
	}
	return append(p.keys[:n:n], "...")
}

// bucketSteps are the automatic bucket widths.
var bucketSteps = []time.Duration{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond,
	10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
}

// autoBucket picks the narrowest round width that gives at most about
// targetBuckets buckets.
func autoBucket(d time.Duration) time.Duration {
	for _, b := range bucketSteps {
		if d/b <= targetBuckets {
			return b
		}
	}
	return roundUp(d/targetBuckets, 24*time.Hour)
}

// traceScan is what one pass over a trace learns.
type traceScan struct {
	counts      []int64 // requests per policy
	abs         bool
	first, last time.Time
	lastOffset  time.Duration
	firstKey    string
	keys        map[string]bool // only the first maxScanKeys
}

const maxScanKeys = 1 << 16

// scanTrace reads the whole trace once, so that a malformed line is
// reported, with its number, before anything runs, and the run is sized.
// Times must not go backwards for any policy.
func scanTrace(name string, policies []*config.Policy) (*traceScan, error) {
	rd, f, err := openRecords(name, false)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := newTraceScanner(name, policies)
	if err := sc.addAll(rd); err != nil {
		return nil, err
	}
	return sc.s, nil
}

// openRecords opens file and a Reader of its records (of a decision log
// when decisions is set); the caller closes the file.
func openRecords(file string, decisions bool) (*Reader, io.Closer, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, nil, err
	}
	rd, err := NewReader(f, file, decisions)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return rd, f, nil
}

// addAll learns every record of rd.
func (sc *traceScanner) addAll(rd *Reader) error {
	for {
		rec, err := rd.Next()
		if err != nil {
			return endOfRecords(err)
		}
		if err := sc.add(rec); err != nil {
			return err
		}
	}
}

// traceScanner is the state of a scan: what it has learnt, and each
// policy's last time and line, to refuse time going backwards.
type traceScanner struct {
	name     string
	policies []*config.Policy
	byName   map[string]int
	last     []time.Duration
	lastLine []int
	start    time.Time
	s        *traceScan
}

func newTraceScanner(name string, policies []*config.Policy) *traceScanner {
	sc := &traceScanner{name: name, policies: policies, byName: map[string]int{},
		last: make([]time.Duration, len(policies)), lastLine: make([]int, len(policies)),
		s: &traceScan{counts: make([]int64, len(policies)), keys: map[string]bool{}}}
	for i, p := range policies {
		sc.byName[p.Name] = i
	}
	return sc
}

// add learns one record, for every policy or the one it names.
func (sc *traceScanner) add(rec Record) error {
	at := sc.observe(rec)
	if at > MaxDuration {
		return sc.lineError(rec, fmt.Errorf("%v after the trace's start, more than the longest run, %v", at, MaxDuration))
	}
	if rec.Policy == "" {
		return sc.applyAll(rec, at)
	}
	i, ok := sc.byName[rec.Policy]
	if !ok {
		return sc.lineError(rec, fmt.Errorf("policy %q is not among the policies simulated", rec.Policy))
	}
	return sc.apply(i, rec, at)
}

// applyAll counts rec, at at after the start, for every policy.
func (sc *traceScanner) applyAll(rec Record, at time.Duration) error {
	for i := range sc.policies {
		if err := sc.apply(i, rec, at); err != nil {
			return err
		}
	}
	return nil
}

// observe learns the trace-wide facts of rec (the first record's key and
// time, the keys seen, the latest time) and returns its time after the
// trace's start.
func (sc *traceScanner) observe(rec Record) time.Duration {
	s := sc.s
	if s.firstKey == "" {
		sc.observeFirst(rec)
	}
	if len(s.keys) < maxScanKeys {
		s.keys[rec.Key] = true
	}
	if !rec.Absolute {
		s.lastOffset = max(s.lastOffset, rec.Offset)
	} else if rec.Time.After(s.last) {
		s.last = rec.Time
	}
	return rec.since(sc.start)
}

// observeFirst learns the facts of the trace's first record: its key,
// whether the trace has absolute times, and then its start.
func (sc *traceScanner) observeFirst(rec Record) {
	sc.s.firstKey = rec.Key
	sc.s.abs = rec.Absolute
	if rec.Absolute {
		sc.s.first = rec.Time
		sc.start = rec.Time.Truncate(time.Second)
	}
}

// apply counts rec, at at after the start, for policy i, refusing time
// going backwards and a cost the policy could never allow.
func (sc *traceScanner) apply(i int, rec Record, at time.Duration) error {
	pol := sc.policies[i]
	if at < sc.last[i] {
		return sc.lineError(rec, fmt.Errorf("time goes backwards for policy %q: %v after the start, before line %d's %v (a trace is in time order)", pol.Name, at, sc.lastLine[i], sc.last[i]))
	}
	if rec.Cost > pol.Limit {
		return sc.lineError(rec, fmt.Errorf("cost %d exceeds the limit %d of policy %q: it could never be allowed", rec.Cost, pol.Limit, pol.Name))
	}
	sc.last[i], sc.lastLine[i] = at, rec.Line
	sc.s.counts[i]++
	return nil
}

func (sc *traceScanner) lineError(rec Record, err error) error {
	return &LineError{File: sc.name, Line: rec.Line, Err: err}
}
