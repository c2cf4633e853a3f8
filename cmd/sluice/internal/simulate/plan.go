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

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
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
	MaxDuration = sluice.MaxWindow
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
	if len(opts.Policies) == 0 {
		return nil, errors.New("no policies: give --config or --policy")
	}
	if len(opts.Traffic) == 0 && opts.Trace == "" {
		return nil, ErrNoTraffic
	}
	seen := map[string]bool{}
	for _, p := range opts.Policies {
		if seen[p.Name] {
			return nil, fmt.Errorf("policy %q is given twice", p.Name)
		}
		seen[p.Name] = true
	}
	if opts.MaxDecisions == 0 {
		opts.MaxDecisions = DefaultMaxDecisions
	}
	if opts.Duration < 0 || opts.Duration > MaxDuration {
		return nil, fmt.Errorf("--duration must be between 1ms and %v, got %v", MaxDuration, opts.Duration)
	}
	p := &Plan{opts: opts, Start: DefaultStart, Requests: make([]int64, len(opts.Policies))}
	for _, t := range opts.Traffic {
		for _, pol := range opts.Policies {
			if t.Cost > pol.Limit {
				return nil, fmt.Errorf("traffic %q: cost %d exceeds the limit %d of policy %q: it could never be allowed", t.Spec, t.Cost, pol.Limit, pol.Name)
			}
		}
		var idx []int32
		for k := 0; k < t.Keys; k++ {
			name := t.Key
			if t.Keys > 1 {
				name = fmt.Sprintf("%s-%d", t.Key, k)
			}
			idx = append(idx, int32(len(p.keys)))
			p.keys = append(p.keys, name)
		}
		p.srcKeys = append(p.srcKeys, idx)
	}
	var traceEnd time.Duration
	var traceCounts []int64
	if opts.Trace != "" {
		scan, err := scanTrace(opts.Trace, opts.Policies)
		if err != nil {
			return nil, err
		}
		traceCounts = scan.counts
		if scan.abs {
			p.traceAbs = true
			p.Start = scan.first.Truncate(time.Second)
			traceEnd = scan.last.Sub(p.Start)
		} else {
			traceEnd = scan.lastOffset
		}
		if p.Watch == "" && len(opts.Traffic) == 0 {
			p.Watch = scan.firstKey
		}
		if opts.Watch != "" && !scan.keys[opts.Watch] && len(scan.keys) < maxScanKeys && !p.hasKey(opts.Watch) {
			return nil, fmt.Errorf("--watch %q: no request uses this key", opts.Watch)
		}
	} else if opts.Watch != "" && !p.hasKey(opts.Watch) {
		return nil, fmt.Errorf("--watch %q: no request uses this key (the sources' keys are %v)", opts.Watch, p.keyList(5))
	}
	if opts.Watch != "" {
		p.Watch = opts.Watch
	} else if len(p.keys) > 0 {
		p.Watch = p.keys[0]
	}
	p.Duration = opts.Duration
	if p.Duration == 0 {
		p.Duration = DefaultDuration
		if opts.Trace != "" {
			// Up to the last request, in whole seconds.
			p.Duration = roundUp(traceEnd+time.Microsecond, time.Second)
		}
	}
	if p.Duration > MaxDuration {
		return nil, fmt.Errorf("the trace spans %v, more than the longest run, %v", p.Duration, MaxDuration)
	}
	p.Bucket = opts.Bucket
	if p.Bucket == 0 {
		p.Bucket = autoBucket(p.Duration)
	}
	if p.Bucket < time.Millisecond || p.Bucket%time.Microsecond != 0 {
		return nil, fmt.Errorf("--bucket must be at least 1ms and a whole number of microseconds, got %v", p.Bucket)
	}
	nb := int64(math.Ceil(float64(p.Duration) / float64(p.Bucket)))
	if nb > MaxBuckets {
		return nil, fmt.Errorf("%v in buckets of %v is %d buckets, more than %d: use a wider --bucket", p.Duration, p.Bucket, nb, MaxBuckets)
	}
	p.Buckets = int(nb)
	var total int64
	for i := range opts.Policies {
		var n float64
		for _, t := range opts.Traffic {
			n += t.Expected(p.Duration)
		}
		if traceCounts != nil {
			n += float64(traceCounts[i])
		}
		p.Requests[i] = int64(math.Ceil(n))
		total += p.Requests[i] + int64(p.Buckets)
	}
	p.Decisions = total
	if total > opts.MaxDecisions {
		return nil, &TooLongError{Decisions: total, Max: opts.MaxDecisions, Policies: len(opts.Policies), Duration: p.Duration}
	}
	return p, nil
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
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rd, err := NewReader(f, name, false)
	if err != nil {
		return nil, err
	}
	s := &traceScan{counts: make([]int64, len(policies)), keys: map[string]bool{}}
	byName := map[string]int{}
	for i, p := range policies {
		byName[p.Name] = i
	}
	last := make([]time.Duration, len(policies))
	lastLine := make([]int, len(policies))
	var start time.Time
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if s.firstKey == "" {
			s.firstKey = rec.Key
			s.abs = rec.Absolute
			if rec.Absolute {
				s.first = rec.Time
				start = rec.Time.Truncate(time.Second)
			}
		}
		if len(s.keys) < maxScanKeys {
			s.keys[rec.Key] = true
		}
		at := rec.Offset
		if rec.Absolute {
			at = rec.Time.Sub(start)
			if rec.Time.After(s.last) {
				s.last = rec.Time
			}
		} else if at > s.lastOffset {
			s.lastOffset = at
		}
		if at > MaxDuration {
			return nil, &LineError{File: name, Line: rec.Line, Err: fmt.Errorf("%v after the trace's start, more than the longest run, %v", at, MaxDuration)}
		}
		apply := func(i int) error {
			if at < last[i] {
				return &LineError{File: name, Line: rec.Line, Err: fmt.Errorf("time goes backwards for policy %q: %v after the start, before line %d's %v (a trace is in time order)", policies[i].Name, at, lastLine[i], last[i])}
			}
			if rec.Cost > policies[i].Limit {
				return &LineError{File: name, Line: rec.Line, Err: fmt.Errorf("cost %d exceeds the limit %d of policy %q: it could never be allowed", rec.Cost, policies[i].Limit, policies[i].Name)}
			}
			last[i], lastLine[i] = at, rec.Line
			s.counts[i]++
			return nil
		}
		if rec.Policy == "" {
			for i := range policies {
				if err := apply(i); err != nil {
					return nil, err
				}
			}
			continue
		}
		i, ok := byName[rec.Policy]
		if !ok {
			return nil, &LineError{File: name, Line: rec.Line, Err: fmt.Errorf("policy %q is not among the policies simulated", rec.Policy)}
		}
		if err := apply(i); err != nil {
			return nil, err
		}
	}
	return s, nil
}
