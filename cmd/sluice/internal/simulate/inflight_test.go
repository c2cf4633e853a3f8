package simulate

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// leaseRef is a plain model of an in_flight policy and its holders, for
// the tests: every lease of every key with its end, in microseconds.
type leaseRef struct {
	limit, lease, renew int64
	leases              map[string]map[int]int64 // key → lease → end
	crashed             map[int]bool
	holders             []refHolder
	next                int
	released, crashes   int64
	releasedEnded, lost int64
}

// refHolder is a lease's holder: its next renewal or release.
type refHolder struct {
	key         string
	lease       int
	at, end     int64
	done, crash bool
}

func newLeaseRef(limit int64, lease time.Duration) *leaseRef {
	l := lease.Microseconds()
	return &leaseRef{limit: limit, lease: l, renew: max(l/3, 1), leases: map[string]map[int]int64{}, crashed: map[int]bool{}}
}

// count is the leases of key not ended at t.
func (m *leaseRef) count(key string, t int64) int64 {
	var n int64
	for _, end := range m.leases[key] {
		if end > t {
			n++
		}
	}
	return n
}

// actUntil runs the holders' renewals and releases before t (at t too
// when inclusive).
func (m *leaseRef) actUntil(t int64, inclusive bool) {
	for {
		best := -1
		for i, h := range m.holders {
			if !h.done && (h.at < t || inclusive && h.at == t) && (best < 0 || h.at < m.holders[best].at) {
				best = i
			}
		}
		if best < 0 {
			return
		}
		h := &m.holders[best]
		end, held := m.leases[h.key][h.lease]
		held = held && end > h.at
		switch {
		case h.at == h.end: // the release
			if held {
				m.released++
			} else {
				m.releasedEnded++
			}
			delete(m.leases[h.key], h.lease)
			h.done = true
		case !held:
			m.lost++
			h.done = true
		default:
			m.leases[h.key][h.lease] = h.at + m.lease
			h.at = min(h.at+m.renew, h.end)
		}
	}
}

// acquire decides an arrival at t on key, holding for hold µs.
func (m *leaseRef) acquire(t int64, key string, hold int64, crash bool) (allowed bool, held int64) {
	m.actUntil(t, true)
	n := m.count(key, t)
	if n >= m.limit {
		return false, n
	}
	if m.leases[key] == nil {
		m.leases[key] = map[int]int64{}
	}
	m.next++
	m.leases[key][m.next] = t + m.lease
	if crash {
		m.crashes++
		m.crashed[m.next] = true
	} else {
		first := min(t+m.renew, t+hold)
		if m.renew >= hold {
			first = t + hold
		}
		m.holders = append(m.holders, refHolder{key: key, lease: m.next, at: first, end: t + hold})
	}
	return true, n + 1
}

// held returns the leases not ended at t, all keys, and those of crashed
// holders.
func (m *leaseRef) held(t int64) (all, crashed int64) {
	for _, ls := range m.leases {
		for id, end := range ls {
			if end > t {
				all++
				if m.crashed[id] {
					crashed++
				}
			}
		}
	}
	return all, crashed
}

// refBuckets runs the plan's traffic through the model and returns its
// buckets, watching key watch (an index of the plan's keys).
func refBuckets(t *testing.T, plan *Plan, m *leaseRef, watch string) ([]Bucket, *leaseRef) {
	t.Helper()
	var srcs []*synthetic
	for i, tr := range plan.opts.Traffic {
		srcs = append(srcs, newSynthetic(tr, plan.srcKeys[i], plan.opts.Seed, i, plan.Duration))
	}
	width, runEnd := plan.Bucket.Microseconds(), plan.Duration.Microseconds()
	out := make([]Bucket, plan.Buckets)
	b := 0
	closeUntil := func(t int64) {
		for b < len(out) && (b+1)*int(width) <= int(t) || b < len(out) && t >= runEnd {
			end := min(int64(b+1)*width, runEnd)
			m.actUntil(end, false)
			out[b].Remaining = m.limit - m.count(watch, end)
			out[b].Held, out[b].Crashed = m.held(end)
			b++
		}
	}
	for {
		best := -1
		for i, s := range srcs {
			if at, ok := s.peek(); ok && (best < 0 || at < srcs[best].next) {
				best = i
			}
		}
		if best < 0 || srcs[best].next >= runEnd {
			break
		}
		ev := srcs[best].pop()
		closeUntil(ev.at)
		ok, n := m.acquire(ev.at, plan.keys[ev.key], ev.hold, ev.crash)
		out[b].Requests++
		if ok {
			out[b].Allowed++
			out[b].Peak = max(out[b].Peak, n)
		} else {
			out[b].Refused++
		}
	}
	closeUntil(runEnd)
	return out, m
}

// runInFlight plans and runs opts.
func runInFlight(t *testing.T, opts Options) (*Plan, *Result) {
	t.Helper()
	plan, err := NewPlan(opts)
	if err != nil {
		t.Fatal(err)
	}
	res, err := plan.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return plan, res
}

// compareInFlight compares the run's in_flight policy p with the model.
func compareInFlight(t *testing.T, name string, p *PolicyResult, want []Bucket, m *leaseRef) {
	t.Helper()
	for i, b := range p.Buckets {
		w := want[i]
		if b.Requests != w.Requests || b.Allowed != w.Allowed || b.Refused != w.Refused || b.Remaining != w.Remaining ||
			b.Held != w.Held || b.Crashed != w.Crashed || b.Peak != w.Peak {
			t.Fatalf("%s: bucket %d: got %+v, want %+v", name, i, b, w)
		}
	}
	if p.Released != m.released || p.Crashed != m.crashes || p.ReleasedEnded != m.releasedEnded || p.RenewalsLost != m.lost {
		t.Fatalf("%s: released %d (%d ended), crashed %d, renewals lost %d; want %d (%d), %d, %d",
			name, p.Released, p.ReleasedEnded, p.Crashed, p.RenewalsLost, m.released, m.releasedEnded, m.crashes, m.lost)
	}
}

// TestInFlightExample: 20 requests a second, each holding its lease for
// 500ms, against a limit of 5 (Lease 1s): 10 would be held at once, so
// half are refused and 5 are held; then half of the holders crash, and
// their slots are held until Lease after they were acquired. The run
// matches the plain model bucket for bucket.
func TestInFlightExample(t *testing.T) {
	pols := mustPolicies(t, "name=exports,algorithm=in_flight,limit=5,lease=1s")
	opts := Options{Policies: pols, Traffic: mustTraffic(t, "steady:20/s,hold=500ms,until=2s", "steady:20/s,hold=500ms,crash=0.5,from=2s"),
		Duration: 6 * time.Second, Bucket: 100 * time.Millisecond, Seed: 3}
	plan, res := runInFlight(t, opts)
	p := res.Policies[0]
	want, m := refBuckets(t, plan, newLeaseRef(5, time.Second), plan.Watch)
	compareInFlight(t, "example", p, want, m)
	for i, b := range p.Buckets {
		if b.Peak > 5 || b.Held > 5 || b.Remaining != 5-b.Held {
			t.Fatalf("bucket %d: %+v: more than the limit held", i, b)
		}
	}
	// Steady: every 500ms, the five released slots are taken at once
	// (a release comes before an arrival at its instant) and the next five
	// refused: 20 allowed and 20 refused in the first 2s, 5 held from 200ms.
	var allowed, refused int64
	for i, b := range p.Buckets[:20] {
		allowed, refused = allowed+b.Allowed, refused+b.Refused
		if i >= 2 && b.Held != 5 { // from the third bucket on
			t.Errorf("%+v: want 5 held", b)
		}
	}
	if allowed != 20 || refused != 20 {
		t.Errorf("first 2s: %d allowed, %d refused; want 20 and 20", allowed, refused)
	}
	if p.Crashed == 0 || p.Released == 0 {
		t.Fatalf("crashed %d, released %d", p.Crashed, p.Released)
	}
	crashedSeen := false
	for _, b := range p.Buckets {
		crashedSeen = crashedSeen || b.Crashed > 0
	}
	if !crashedSeen {
		t.Error("no bucket shows a crashed holder's lease")
	}
}

// TestInFlightProperty: random timelines (Poisson and steady arrivals,
// holds constant, exponential and uniform, some as long as several
// Leases, crashes, several keys, microsecond leases) run exactly as the
// plain model says.
func TestInFlightProperty(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 99))
		limit := 1 + rng.Int64N(6)
		lease := time.Duration(1000+rng.Int64N(400_000)) * time.Microsecond
		if seed%4 == 0 {
			lease = 300 * time.Millisecond // a third of it is whole: renewals at exact instants
		}
		holds := []string{"200ms", "exp:150ms", "50ms-900ms", "300ms", "0", lease.String()}
		var specs []string
		for k := range 1 + rng.IntN(3) {
			kind := []string{"poisson", "steady"}[rng.IntN(2)]
			spec := fmt.Sprintf("%s:%d/s,hold=%s,keys=%d", kind, 5+rng.IntN(60), holds[rng.IntN(len(holds))], 1+rng.IntN(3))
			if rng.IntN(2) == 0 {
				spec += fmt.Sprintf(",crash=%.2f", rng.Float64()*0.3)
			}
			spec += fmt.Sprintf(",key=k%d", k)
			specs = append(specs, spec)
		}
		pols := mustPolicies(t, fmt.Sprintf("name=p,algorithm=in_flight,limit=%d,lease=%s", limit, lease))
		opts := Options{Policies: pols, Traffic: mustTraffic(t, specs...), Duration: 3 * time.Second,
			Bucket: time.Duration(7+rng.IntN(100)) * time.Millisecond, Seed: seed}
		plan, res := runInFlight(t, opts)
		want, m := refBuckets(t, plan, newLeaseRef(limit, lease), plan.Watch)
		compareInFlight(t, fmt.Sprintf("seed %d (limit %d, lease %v, %v)", seed, limit, lease, specs), res.Policies[0], want, m)
	}
}

// TestInFlightRefusals: what an in_flight policy cannot be simulated with
// is refused with the reason.
func TestInFlightRefusals(t *testing.T) {
	inflight := mustPolicies(t, "name=exports,algorithm=in_flight,limit=5,lease=30s")
	rate := mustPolicies(t, "name=api,algorithm=gcra,burst=5,rate=5/s")
	trace := writeFile(t, "trace", "0.1s,a\n")
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{Policies: inflight, Traffic: mustTraffic(t, "steady:10/s")}, `traffic "steady:10/s": policy "exports" is in_flight: give hold=`},
		{Options{Policies: inflight, Traffic: mustTraffic(t, "steady:10/s,hold=1s,cost=2")}, "cost must be 1"},
		{Options{Policies: inflight, Trace: trace}, `policy "exports" is in_flight: a trace's requests have no durations`},
		{Options{Policies: rate, Traffic: mustTraffic(t, "steady:10/s,hold=1s")}, "hold and crash are for in_flight policies"},
	} {
		if _, err := NewPlan(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want %q", tc.opts.Traffic, err, tc.want)
		}
	}
	log := writeFile(t, "log", `{"time":"0.1s","policy":"exports","key":"a","cost":1,"allowed":true}`+"\n")
	if _, err := Replay(context.Background(), log, inflight); err == nil || !strings.Contains(err.Error(), "cannot be replayed") {
		t.Errorf("replay under an in_flight policy: %v", err)
	}
	for _, bad := range []string{"steady:1/s,hold=x", "steady:1/s,hold=exp:0", "steady:1/s,hold=2s-1s", "steady:1/s,crash=0.5",
		"steady:1/s,hold=1s,crash=2", "steady:1/s,hold=1s,crash=-1%", "steady:1/s,hold=1.5us"} {
		if _, err := ParseTraffic(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	for spec, want := range map[string]Hold{"steady:1/s,hold=200ms": {Dist: "const", Min: 200 * time.Millisecond},
		"steady:1/s,hold=exp:1s": {Dist: "exp", Min: time.Second}, "steady:1/s,hold=1s-2s,crash=5%": {Dist: "uniform", Min: time.Second, Max: 2 * time.Second}} {
		tr, err := ParseTraffic(spec)
		if err != nil || tr.Hold != want {
			t.Errorf("%q: %+v, %v", spec, tr.Hold, err)
		}
	}
}

// TestInFlightPicture: a run with an in_flight policy beside a rate
// policy draws both rows, the in_flight one with held leases against the
// limit.
func TestInFlightPicture(t *testing.T) {
	pols := mustPolicies(t, "name=exports,algorithm=in_flight,limit=5,lease=1s", "algorithm=gcra,burst=10,rate=10/s")
	_, res := runInFlight(t, Options{Policies: pols, Traffic: mustTraffic(t, "steady:20/s,hold=exp:400ms,crash=0.1"), Duration: 4 * time.Second})
	for _, format := range []string{SVG, PNG} {
		var b bytes.Buffer
		if err := WritePicture(&b, res, format); err != nil {
			t.Fatal(err)
		}
		checkPicture(t, format, b.Bytes(), len(pols))
		if format == SVG {
			for _, want := range []string{"leases held by key", "limit 5", "of crashed holders", "all keys together"} {
				if !bytes.Contains(b.Bytes(), []byte(want)) {
					t.Errorf("svg has no text %q", want)
				}
			}
		}
	}
}

// TestInFlightEstimateCountsRenewals: the up-front estimate of an in_flight
// run counts the holders' renewals, every third of the lease while a hold
// lasts: 100 requests a second for 10s, each holding 1s under a lease of
// 300ms, renew 9 times each (at 100ms, ..., 900ms), so the run makes about
// 1,000 acquires, 1,000 releases and 9,000 renewals. Held to within 10%;
// and a saturated policy's renewals are bounded by its limit (5 leases
// renewed every 100ms). Fails when the estimate leaves renewals out
// (about 2,000 decisions) or ignores the limit.
func TestInFlightEstimateCountsRenewals(t *testing.T) {
	for _, tc := range []struct {
		limit    int
		min, max int64
	}{
		{1000, 9_900, 12_100},
		{5, 2_000, 2_000 + 5*100 + 1},
	} {
		pols := mustPolicies(t, fmt.Sprintf("name=p,algorithm=in_flight,limit=%d,lease=300ms", tc.limit))
		plan, err := NewPlan(Options{Policies: pols, Traffic: mustTraffic(t, "steady:100/s,hold=1s"), Duration: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if got := plan.Decisions - int64(plan.Buckets); got < tc.min || got > tc.max {
			t.Errorf("limit %d: the estimate is %d decisions (besides %d buckets), want %d to %d", tc.limit, got, plan.Buckets, tc.min, tc.max)
		}
	}
}
