package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
)

// The checks of an in_flight policy: holders in several processes never
// hold more than Limit leases at once and take freed slots again
// promptly; a holder killed with SIGKILL gets its slots back after Lease.

// Defaults for the in_flight checks.
const (
	// DefaultLeaseWait is the longest Lease the crash check waits out
	// (Options.LeaseWait).
	DefaultLeaseWait = 10 * time.Second
	// holdRun is how long the holders of the concurrency check run.
	holdRun = time.Second
	// longestHold bounds a holder's hold (and a quarter of Lease does):
	// a lease is always released well before it would end.
	longestHold = 20 * time.Millisecond
	// crashPoll is how often the crash check tries to take a slot.
	crashPoll = 5 * time.Millisecond
)

// inFlightChecks are the checks of an in_flight policy.
func (r *run) inFlightChecks() []namedCheck {
	return []namedCheck{
		{"concurrency", r.holders},
		{"crash", r.crash},
		{"failure", r.failure},
		{"ttl", r.ttl},
	}
}

// holders runs the concurrency check of an in_flight policy: the worker
// processes, with at least twice Limit holders among them, take leases of
// one key and hold them for random times, again and again for a second.
// By the holders' own timestamps (after Acquire returned, before Release
// was sent), never more than Limit may be held at once; every release must
// free its lease (each is held at most a quarter of Lease); and freed
// slots must be taken again promptly: at least half of Limit held on
// average.
func (r *run) holders(ctx context.Context, p *config.Policy, chk *Check) {
	pol := p.Policy.(sluice.InFlight)
	per := max(r.opts.Goroutines, int((2*pol.Limit+int64(r.opts.Processes)-1)/int64(r.opts.Processes)))
	longest := min(longestHold, pol.Lease/4)
	j := job{Mode: "hold", Identity: "holders", Goroutines: per, RunMicro: holdRun.Microseconds(), HoldMicro: longest.Microseconds()}
	got, err := r.spawn(ctx, p, j, 0)
	if err != nil {
		chk.fail("%v", err)
		return
	}
	maxAt, mean := overlap(got.Spans)
	holders := per * r.opts.Processes
	for k, v := range map[string]float64{"processes": float64(r.opts.Processes), "holders": float64(holders), "limit": float64(pol.Limit),
		"leases": float64(len(got.Spans)), "max_held": float64(maxAt), "mean_held": mean, "refused": float64(got.Refused),
		"lost": float64(got.Lost), "degraded": float64(got.Degraded), "errors": float64(got.Errors), "longest_hold_ms": ms(longest)} {
		chk.fig(k, v)
	}
	chk.Detail = fmt.Sprintf("%d leases held for up to %v by %d holders in %d processes over %v: at most %d held at once by the holders' own clocks (limit %d), %.1f on average; %d refusals",
		len(got.Spans), longest, holders, r.opts.Processes, holdRun, maxAt, pol.Limit, mean, got.Refused)
	judgeHolders(chk, got, pol.Limit, maxAt, mean)
}

// judgeHolders fails chk for what the holders saw that breaks the
// promise.
func judgeHolders(chk *Check, got tally, limit int64, maxAt int, mean float64) {
	if got.Errors > 0 || got.Degraded > 0 {
		chk.fail("%d errors and %d degraded decisions (first error: %s)", got.Errors, got.Degraded, got.FirstError)
	}
	if len(got.Spans) == 0 {
		chk.fail("no lease was taken")
		return
	}
	if int64(maxAt) > limit {
		chk.fail("%d leases were held at once, more than the limit %d: the limit is not enforced atomically", maxAt, limit)
	}
	if got.Lost > 0 {
		chk.fail("%d of %d releases found their lease ended already, though none was held a quarter of Lease: leases were lost or ended early",
			got.Lost, len(got.Spans))
	}
	if mean < float64(limit)/2 {
		chk.fail("%.2f leases held on average, under half the limit %d, with holders waiting: freed slots are not taken again promptly", mean, limit)
	}
}

// overlap returns the most spans held at once, and the mean number held
// between the first span's start and the last one's end. A span ending at
// the instant another starts does not overlap it.
func overlap(spans [][2]int64) (int, float64) {
	type ev struct {
		t int64
		d int
	}
	evs := make([]ev, 0, 2*len(spans))
	for _, s := range spans {
		evs = append(evs, ev{s[0], 1}, ev{s[1], -1})
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].t == evs[j].t {
			return evs[i].d < evs[j].d
		}
		return evs[i].t < evs[j].t
	})
	if len(evs) == 0 {
		return 0, 0
	}
	cur, maxAt := 0, 0
	var area float64
	for i, e := range evs {
		if i > 0 {
			area += float64(cur) * float64(e.t-evs[i-1].t)
		}
		cur += e.d
		maxAt = max(maxAt, cur)
	}
	if total := evs[len(evs)-1].t - evs[0].t; total > 0 {
		return maxAt, area / float64(total)
	}
	return maxAt, 0
}

// crashLease is the Lease the crash check uses: the policy's, or
// opts.LeaseWait when that is shorter.
func (r *run) crashLease(pol sluice.InFlight) time.Duration {
	return min(pol.Lease, r.opts.LeaseWait)
}

// crash runs the crash check: a worker process takes every slot of a key
// and is killed with SIGKILL while it holds them. Tried every 5ms from
// here, the key must refuse until the leases can have ended (Lease after
// the first acquire was sent), with a RetryAfter no later than when they
// all have (Lease after the last acquire returned), and admit again within
// the margin of that.
func (r *run) crash(ctx context.Context, p *config.Policy, chk *Check) {
	pol := p.Policy.(sluice.InFlight)
	pol.Lease = r.crashLease(pol)
	chk.fig("lease_ms", ms(pol.Lease))
	chk.fig("margin_ms", ms(r.opts.Margin))
	sent, held, err := r.takeAndDie(ctx, p, pol)
	if err != nil {
		chk.fail("%v", err)
		return
	}
	l, err := sluice.New(r.store, pol, sluice.WithName(p.Limiter), sluice.WithPrefix(r.prefix), sluice.WithDenyCache(false),
		sluice.WithTimeout(checkTimeout), sluice.WithLogger(r.log))
	if err != nil {
		chk.fail("%v", err)
		return
	}
	w := crashWatch{earliest: sent.Add(pol.Lease), latest: held.Add(pol.Lease), margin: r.opts.Margin, chk: chk}
	w.watch(ctx, l)
	w.report(pol, p.Policy.(sluice.InFlight).Lease)
}

// takeAndDie has a worker process of its own take every slot of p's
// crash key, then kills it with SIGKILL, and returns when the first
// acquire was sent and the last returned.
func (r *run) takeAndDie(ctx context.Context, p *config.Policy, pol sluice.InFlight) (sent, held time.Time, err error) {
	wp, err := toWire(pol)
	if err != nil {
		return sent, held, err
	}
	j, err := r.wireJob(p, job{Mode: "take", Identity: "crash", Attempts: pol.Limit, Goroutines: r.opts.Goroutines, Policy: wp})
	if err != nil {
		return sent, held, err
	}
	w, err := r.startWorker(ctx)
	if err != nil {
		return sent, held, err
	}
	defer func() { w.cmd.Process.Kill(); w.cmd.Wait() }()
	t, err := w.runJob(j)
	if err != nil {
		return sent, held, err
	}
	if t.Allowed != pol.Limit {
		return sent, held, fmt.Errorf("the holder to be killed took %d of the %d slots of an unused key (%d refused, %d degraded, %d errors: %s)",
			t.Allowed, pol.Limit, t.Refused, t.Degraded, t.Errors, t.FirstError)
	}
	if err := w.cmd.Process.Kill(); err != nil { // SIGKILL
		return sent, held, err
	}
	return time.Unix(0, t.SentNano), time.Unix(0, t.HeldNano), nil
}

// runJob sends j to the worker, gives it the word to go, and reads its
// tally.
func (w *workerProc) runJob(j job) (tally, error) {
	var t tally
	line, _ := json.Marshal(j)
	if _, err := w.stdin.Write(append(line, '\n')); err != nil {
		return t, fmt.Errorf("worker process: %w; its stderr: %s", err, w.stderr)
	}
	var m map[string]any
	if err := w.read(0, &m); err != nil {
		return t, err
	}
	if m["ready"] != true {
		return t, fmt.Errorf("worker process: %v", m["error"])
	}
	w.stdin.Write([]byte("go\n"))
	if err := w.read(0, &t); err != nil {
		return t, err
	}
	if t.Error != "" {
		return t, fmt.Errorf("worker process: %s", t.Error)
	}
	return t, nil
}

// crashWatch is the crash check's watch of a key whose holder was killed.
type crashWatch struct {
	earliest, latest time.Time // when the killed holder's leases can first end, and have all ended
	margin           time.Duration
	chk              *Check
	refused          int
	admitted         time.Time // when the acquire that was admitted returned
}

// watch tries to take a slot every crashPoll until one is given (it is
// released at once), failing the check for an admission before the
// leases could end, a RetryAfter past their end, an error, or no
// admission within the margin.
func (w *crashWatch) watch(ctx context.Context, l *sluice.Limiter) {
	giveUp := w.latest.Add(w.margin)
	for {
		ls, res, err := l.Acquire(ctx, "crash")
		after := time.Now()
		switch {
		case err != nil || res.Degraded:
			w.chk.fail("acquire: %+v, %v", res, err)
			return
		case ls != nil:
			ls.Release(ctx)
			w.admitted = after
			if after.Before(w.earliest) {
				w.chk.fail("admitted %v before the killed holder's leases could end: more than the limit held", w.earliest.Sub(after))
			}
			if after.After(giveUp) {
				w.chk.fail("admitted only %v after the killed holder's leases had all ended, more than the margin %v", after.Sub(w.latest), w.margin)
			}
			return
		}
		w.refused++
		if res.RetryAfter <= 0 || after.Add(res.RetryAfter).After(w.latest.Add(w.margin)) {
			w.chk.fail("refused with RetryAfter %v, though every lease ends within %v", res.RetryAfter, w.latest.Sub(after))
		}
		if after.After(giveUp) {
			w.chk.fail("still refused %v after the killed holder's leases had all ended (margin %v): its slots leaked", after.Sub(w.latest), w.margin)
			return
		}
		time.Sleep(crashPoll)
	}
}

// report records the crash check's figures and detail; policyLease is the
// policy's own Lease, named when the check used a shorter one.
func (w *crashWatch) report(pol sluice.InFlight, policyLease time.Duration) {
	c := w.chk
	c.fig("refused", float64(w.refused))
	if w.admitted.IsZero() {
		c.Detail = fmt.Sprintf("a holder of all %d slots killed with SIGKILL: refused %d times", pol.Limit, w.refused)
		return
	}
	past := w.admitted.Sub(w.latest)
	c.fig("admitted_after_lease_ms", ms(past))
	lease := pol.Lease.String()
	if policyLease != pol.Lease {
		lease = fmt.Sprintf("%v (the policy's %v shortened to the lease wait)", pol.Lease, policyLease)
	}
	seen := fmt.Sprintf("refused %d times while its leases lived", w.refused)
	switch {
	case w.refused == 0 && w.admitted.Before(w.earliest):
		seen = "never refused"
	case w.refused == 0:
		seen = "not seen refused (Lease had passed before the first try)"
	}
	when := fmt.Sprintf("%v after its last lease ended", past.Round(100*time.Microsecond))
	if past < 0 {
		when = fmt.Sprintf("%v before its last lease ended (after its first could)", (-past).Round(100*time.Microsecond))
	}
	c.Detail = fmt.Sprintf("a holder of all %d slots killed with SIGKILL, lease %s: %s, admitted again %s (polling every %v; margin %v)",
		pol.Limit, lease, seen, when, crashPoll, w.margin)
}
