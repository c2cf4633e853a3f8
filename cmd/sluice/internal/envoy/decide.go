package envoy

import (
	"context"
	"math"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/httplimit"
)

// Deciding the resolved limits of a ShouldRateLimit request and writing
// the answer (envoyproxy/ratelimit's DoLimit and the worker around it).

// decide decides every resolved descriptor and fills in resp.Statuses,
// each answer written in its block of blocks (newAnswer). Under CountEach,
// each descriptor counts its own hits, refused ones included; under
// CountAllOrNothing a refused request takes nothing.
func (s *Service) decide(ctx context.Context, dom *config.Domain, rs []resolved, resp *rlsv3.RateLimitResponse, blocks []statusBlock) error {
	// Calls of up to smallCall descriptors decide without allocating
	// these.
	var checkBuf [smallCall]sluice.Check
	var idxBuf [smallCall]int
	var resultBuf [smallCall]sluice.Result
	checks, idx := checkBuf[:0], idxBuf[:0]
	var lookNow time.Time // the local cache's clock, read only when it is on
	if s.local != nil {
		lookNow = s.now()
	}
	for i := range rs {
		if rs[i].kind == kindDeny {
			s.lookLocal(&rs[i], lookNow) // upstream looks its counter up too
		}
		if rs[i].kind == kindLimit {
			if s.lookLocal(&rs[i], lookNow) {
				continue // over in the local cache: decided without the store
			}
			pol := rs[i].pol
			if rs[i].peek != nil {
				pol = rs[i].peek
			}
			lim := pol.Limiter()
			if rs[i].shadow {
				lim = pol.Shadow()
			}
			checks = append(checks, sluice.Check{Limiter: lim, Key: rs[i].key, Cost: rs[i].cost(), Plan: rs[i].plan})
			idx = append(idx, i)
		}
	}
	results := resultBuf[:min(len(rs), smallCall)]
	if len(rs) > smallCall {
		results = make([]sluice.Result, len(rs))
	}
	if len(checks) > 0 {
		var dec sluice.Decision
		var err error
		if dom.Counting == config.CountAllOrNothing {
			dec, err = s.decideAllOrNothing(ctx, rs, checks, idx)
		} else {
			dec, err = s.decideEach(ctx, rs, checks, idx)
		}
		if err != nil {
			return err
		}
		for k, res := range dec.Results {
			results[idx[k]] = res
			s.srv.NoteRefused(rs[idx[k]].pol.Config(), rs[idx[k]].key, res)
		}
	}
	now := s.now()
	for i := range rs {
		resp.Statuses[i] = s.status(&rs[i], results[i], now, &blocks[i])
	}
	return nil
}

// smallCall is the number of descriptors per call up to which deciding
// uses buffers on the stack.
const smallCall = 4

// statusBlock holds one descriptor's answer and the messages it points to,
// so that a call's answers take one allocation instead of three per
// descriptor.
type statusBlock struct {
	status rlsv3.RateLimitResponse_DescriptorStatus
	limit  rlsv3.RateLimitResponse_RateLimit
	reset  durationpb.Duration
}

// newAnswer returns a response with n descriptor statuses to fill in and
// the blocks to write them in. The answer of a call of one descriptor (the
// usual call) is one allocation: the response, its list of statuses and
// the status's block together, instead of three.
func newAnswer(n int) (*rlsv3.RateLimitResponse, []statusBlock) {
	if n == 1 {
		return new(oneAnswer).start()
	}
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, n),
	}
	return resp, make([]statusBlock, n)
}

// oneAnswer is the answer of a call of one descriptor, in one block.
type oneAnswer struct {
	resp     rlsv3.RateLimitResponse
	statuses [1]*rlsv3.RateLimitResponse_DescriptorStatus
	blocks   [1]statusBlock
}

// start makes a a fresh answer to fill in, as newAnswer returns it.
func (a *oneAnswer) start() (*rlsv3.RateLimitResponse, []statusBlock) {
	*a = oneAnswer{}
	a.resp.OverallCode, a.resp.Statuses = rlsv3.RateLimitResponse_OK, a.statuses[:]
	return &a.resp, a.blocks[:]
}

// oneAnswers are the answers POST /json reuses from call to call: its
// answer is written out before the handler returns, where gRPC's is
// encoded after the handler, out of its sight.
var oneAnswers = sync.Pool{New: func() any { return new(oneAnswer) }}

// setDuration sets dst to d, as durationpb.New does.
func setDuration(dst *durationpb.Duration, d time.Duration) *durationpb.Duration {
	dst.Seconds, dst.Nanos = int64(d/time.Second), int32(d%time.Second)
	return dst
}

// decideEach counts every descriptor's hits. With StopIncrementWhenOverLimit
// (envoyproxy/ratelimit's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT), the
// counts are read first, and when any descriptor would go over its limit,
// only those that would count their hits.
func (s *Service) decideEach(ctx context.Context, rs []resolved, checks []sluice.Check, idx []int) (sluice.Decision, error) {
	if s.opts.StopIncrementWhenOverLimit && anyLocalOver(rs) {
		// A descriptor over in the local cache: nothing counts.
		for k := range checks {
			if checks[k].Cost > 0 {
				checks[k].Cost = 0
			}
		}
	} else if s.opts.StopIncrementWhenOverLimit {
		over, anyOver, err := wouldGoOver(ctx, rs, checks, idx)
		if err != nil {
			return sluice.Decision{}, err
		}
		if anyOver {
			for k := range checks {
				if !over[k] && checks[k].Cost > 0 {
					checks[k].Cost = 0
				}
			}
		}
	}
	return allowEach(ctx, rs, checks, idx)
}

// allowEach is sluice.AllowEach, but the checks of a policy with grants
// (grants: auto) are decided on their own (Limiter.AllowN), against the
// process's grant: AllowEach does not take them.
func allowEach(ctx context.Context, rs []resolved, checks []sluice.Check, idx []int) (sluice.Decision, error) {
	var grant []int
	for k := range checks {
		if rs[idx[k]].pol.Config().Grants {
			grant = append(grant, k)
		}
	}
	if len(grant) == 0 {
		return sluice.AllowEach(ctx, checks)
	}
	rest := make([]sluice.Check, 0, len(checks)-len(grant))
	for k, c := range checks {
		if !rs[idx[k]].pol.Config().Grants {
			rest = append(rest, c)
		}
	}
	d, err := sluice.AllowEach(ctx, rest)
	if err != nil {
		return d, err
	}
	out := sluice.Decision{Allowed: d.Allowed, Results: make([]sluice.Result, len(checks))}
	j := 0
	for k, c := range checks {
		if !rs[idx[k]].pol.Config().Grants {
			out.Results[k] = d.Results[j]
			j++
			continue
		}
		res, err := c.Limiter.AllowPlan(ctx, c.Key, c.Plan, c.Cost) // a give-back is refused: grants take none
		if err != nil {
			return sluice.Decision{}, err
		}
		out.Results[k] = res
		out.Allowed = out.Allowed && res.Allowed
	}
	return out, nil
}

// wouldGoOver reads the counts of checks (at cost 0) and says which would
// go over their limit with their hits; anyOver also when a requests_per_unit
// 0 limit has a hit. A check of a policy with grants is not read ahead (a
// process knows only its own grant, not the key's count): it counts as
// under its limit here, and its own decision refuses it.
func wouldGoOver(ctx context.Context, rs []resolved, checks []sluice.Check, idx []int) (over []bool, anyOver bool, err error) {
	peeks := make([]sluice.Check, 0, len(checks))
	at := make([]int, 0, len(checks))
	for k, c := range checks {
		if rs[idx[k]].pol.Config().Grants {
			continue
		}
		c.Cost = 0
		peeks, at = append(peeks, c), append(at, k)
	}
	seen, err := sluice.AllowEach(ctx, peeks)
	if err != nil {
		return nil, false, err
	}
	over = make([]bool, len(checks))
	for i := range rs {
		if rs[i].kind == kindDeny && rs[i].hits > 0 {
			anyOver = true // a requests_per_unit 0 limit is over with any hit
		}
	}
	for j, res := range seen.Results {
		k := at[j]
		if checks[k].Cost > 0 && checks[k].Cost > res.Remaining || rs[idx[k]].hits > uint64(rs[idx[k]].policyLimit()) {
			over[k], anyOver = true, true
		}
	}
	return over, anyOver, nil
}

// decideAllOrNothing decides the descriptors together: when one refuses,
// the others give back what they took. A descriptor refused without asking
// the store (requests_per_unit 0, hits above its limit) makes the others
// only look.
func (s *Service) decideAllOrNothing(ctx context.Context, rs []resolved, checks []sluice.Check, idx []int) (sluice.Decision, error) {
	refused := false
	for i := range rs {
		r := &rs[i]
		if r.shadow || r.hits == 0 {
			continue
		}
		if r.kind == kindDeny || r.kind == kindLimit && (r.hits > uint64(r.policyLimit()) || r.localOver) && !r.pol.Config().Shadow {
			refused = true
		}
	}
	for k := range checks {
		// A refused call only looks; AllowAll takes no give-backs
		// (is_negative_hits), so those only look too.
		if refused || checks[k].Cost < 0 {
			checks[k].Cost = 0
		}
	}
	return sluice.AllowAll(ctx, checks)
}

// status is the answer for one descriptor, written in b.
func (s *Service) status(r *resolved, res sluice.Result, now time.Time, b *statusBlock) *rlsv3.RateLimitResponse_DescriptorStatus {
	ds := &b.status
	ds.Code = rlsv3.RateLimitResponse_OK
	switch r.kind {
	case kindUnlimited:
		ds.LimitRemaining = math.MaxUint32
	case kindDeny:
		if r.localOver {
			s.localStatus(r, now, b)
			break
		}
		s.denyStatus(r, now, b)
		if s.local != nil && r.localKey != "" && r.hits > 0 {
			s.local.remember(r.localKey, r.localUntil, now)
		}
	case kindLimit:
		if r.localOver {
			s.localStatus(r, now, b)
		} else {
			s.limitStatus(r, res, now, b)
		}
	}
	return ds
}

// denyStatus answers a requests_per_unit 0 limit: over with any hit.
func (s *Service) denyStatus(r *resolved, now time.Time, b *statusBlock) {
	ds := &b.status
	ds.CurrentLimit = envoyCurrentLimit(r.limit, &b.limit)
	ds.DurationUntilReset = setDuration(&b.reset, untilReset(r.limit.Window, 0, now))
	over := r.hits > 0
	s.stats.record(r.stat, r.hits, 0, 0, over, r.shadow)
	if over && !r.shadow {
		ds.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
}

// limitStatus answers a decided limit from the store's result res.
func (s *Service) limitStatus(r *resolved, res sluice.Result, now time.Time, b *statusBlock) {
	ds := &b.status
	limit, window := r.inForce(res)
	if r.limit != nil && res.Source != sluice.SourceOverride {
		ds.CurrentLimit = envoyCurrentLimit(r.limit, &b.limit)
	} else {
		ds.CurrentLimit = currentLimit(r.pol.Config().Name, limit, window, &b.limit)
	}
	// Over the limit: refused by the store, or refused but shadowed, or
	// more hits than the limit could ever allow.
	over := !res.Allowed || res.Shadowed || r.hits > uint64(limit) && !r.refund
	refuse := over && !r.shadow && !r.pol.Config().Shadow
	if res.Degraded {
		// The store did not answer: the policy's on_failure decided.
		over = !res.Allowed
		refuse = over
	}
	if refuse {
		ds.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if !over {
		rem := res.Remaining
		if r.peek != nil {
			rem-- // the peek's limit is one higher
		}
		ds.LimitRemaining = uint32(min(max(rem, 0), math.MaxUint32))
	}
	ds.DurationUntilReset = setDuration(&b.reset, untilReset(window, res.ResetAfter, now))
	if s.local != nil && r.localKey != "" && over && !res.Degraded {
		s.local.remember(r.localKey, r.localUntil, now)
	}
	if !r.refund {
		s.stats.record(r.stat, r.hits, limit, res.Remaining, over, r.shadow || r.pol.Config().Shadow)
	}
}

// inForce is the limit and window that decided res: a key's override's
// when one decided, as /v1/check answers it (sluice.Rule.InForce;
// envoyproxy/ratelimit has no key overrides, and answers with the limit
// that decided), else the plan's limit and the policy's window.
func (r *resolved) inForce(res sluice.Result) (int64, time.Duration) {
	if res.Source != sluice.SourceOverride {
		return r.policyLimit(), r.pol.Config().Window()
	}
	rule, ok := r.pol.Limiter().PlanRule(r.plan)
	if !ok {
		rule = r.pol.Limiter().Rule()
	}
	rule = httplimit.InForce(rule, res)
	return rule.Limit, rule.Period()
}

// untilReset is the time until the window ends, in whole seconds as
// envoyproxy/ratelimit answers it: from the store's answer when it has one,
// else from the clock (windows are aligned on the Unix epoch).
func untilReset(window, resetAfter time.Duration, now time.Time) time.Duration {
	if resetAfter > 0 {
		return time.Duration(ceilSeconds(resetAfter)) * time.Second
	}
	w := int64(window / time.Second)
	if w <= 0 {
		return 0
	}
	return time.Duration(w-now.Unix()%w) * time.Second
}

// ceilSeconds rounds up to whole seconds, never negative.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

var envoyUnitEnum = map[string]rlsv3.RateLimitResponse_RateLimit_Unit{
	"SECOND": rlsv3.RateLimitResponse_RateLimit_SECOND, "MINUTE": rlsv3.RateLimitResponse_RateLimit_MINUTE,
	"HOUR": rlsv3.RateLimitResponse_RateLimit_HOUR, "DAY": rlsv3.RateLimitResponse_RateLimit_DAY,
	"WEEK": rlsv3.RateLimitResponse_RateLimit_WEEK, "MONTH": rlsv3.RateLimitResponse_RateLimit_MONTH,
	"YEAR": rlsv3.RateLimitResponse_RateLimit_YEAR,
}

// envoyCurrentLimit describes an envoyproxy/ratelimit limit as written: its
// name (empty when unnamed), requests per unit and unit, written in rl.
func envoyCurrentLimit(l *config.EnvoyLimit, rl *rlsv3.RateLimitResponse_RateLimit) *rlsv3.RateLimitResponse_RateLimit {
	rl.Name, rl.RequestsPerUnit, rl.Unit = l.Name, uint32(min(l.RequestsPerUnit, math.MaxUint32)), envoyUnitEnum[l.Unit]
	if l.Multiplier > 1 {
		rl.UnitMultiplier = wrapperspb.UInt32(uint32(l.Multiplier))
	}
	return rl
}

// currentLimit describes a named sluice policy's limit per window in
// Envoy's terms: requests per unit when the window is one unit, else the
// limit per the window in seconds; written in rl.
func currentLimit(name string, limit int64, w time.Duration, rl *rlsv3.RateLimitResponse_RateLimit) *rlsv3.RateLimitResponse_RateLimit {
	rl.Name, rl.RequestsPerUnit = name, uint32(min(limit, math.MaxUint32))
	switch w {
	case time.Second:
		rl.Unit = rlsv3.RateLimitResponse_RateLimit_SECOND
	case time.Minute:
		rl.Unit = rlsv3.RateLimitResponse_RateLimit_MINUTE
	case time.Hour:
		rl.Unit = rlsv3.RateLimitResponse_RateLimit_HOUR
	case 24 * time.Hour:
		rl.Unit = rlsv3.RateLimitResponse_RateLimit_DAY
	case 7 * 24 * time.Hour:
		rl.Unit = rlsv3.RateLimitResponse_RateLimit_WEEK
	default:
		// A window of several units: Envoy's unit_multiplier expresses it
		// for whole seconds.
		if w >= time.Second && w%time.Second == 0 && w/time.Second <= math.MaxUint32 {
			rl.Unit = rlsv3.RateLimitResponse_RateLimit_SECOND
			rl.UnitMultiplier = wrapperspb.UInt32(uint32(w / time.Second))
		}
	}
	return rl
}

// overallCode is OVER_LIMIT when any descriptor outside quota mode is, or
// when every quota-mode descriptor is (envoyproxy/ratelimit's quota_mode);
// OK under the global shadow mode.
func (s *Service) overallCode(rs []resolved, statuses []*rlsv3.RateLimitResponse_DescriptorStatus) rlsv3.RateLimitResponse_Code {
	failed, quota, quotaFailed := 0, 0, 0
	for i, ds := range statuses {
		over := ds.Code == rlsv3.RateLimitResponse_OVER_LIMIT
		if i < len(rs) && rs[i].quota && rs[i].kind != kindUnlimited {
			quota++
			if over {
				quotaFailed++
			}
		} else if over {
			failed++
		}
	}
	if failed == 0 && (quota == 0 || quotaFailed < quota) {
		return rlsv3.RateLimitResponse_OK
	}
	if s.opts.ShadowMode {
		s.stats.globalShadow.Inc()
		return rlsv3.RateLimitResponse_OK
	}
	return rlsv3.RateLimitResponse_OVER_LIMIT
}

// lookLocal looks r up in the local cache (LOCAL_CACHE_SIZE_IN_BYTES), as
// upstream looks up every descriptor with a limit: true when its counter
// is remembered over its limit in this window.
func (s *Service) lookLocal(r *resolved, now time.Time) bool {
	if s.local == nil || r.limit == nil || r.refund {
		return false
	}
	r.localKey = localKey(r.key, r.limit.Window, now)
	if w := int64(r.limit.Window / time.Second); w > 0 {
		r.localUntil = time.Unix((now.Unix()/w+1)*w, 0)
	} else {
		r.localUntil = now.Add(time.Second)
	}
	r.localOver = s.local.over(r.localKey, now)
	return r.localOver
}

func anyLocalOver(rs []resolved) bool {
	for i := range rs {
		if rs[i].localOver {
			return true
		}
	}
	return false
}

// localStatus answers a descriptor over its limit in the local cache: over
// the limit, 0 remaining, its hits counted as over_limit and
// over_limit_with_local_cache (OK and shadow_mode under shadow mode).
func (s *Service) localStatus(r *resolved, now time.Time, b *statusBlock) {
	ds := &b.status
	ds.CurrentLimit = envoyCurrentLimit(r.limit, &b.limit)
	ds.DurationUntilReset = setDuration(&b.reset, untilReset(r.limit.Window, 0, now))
	shadow, limit := r.shadow, int64(0) // a requests_per_unit 0 limit has no policy
	if r.pol != nil {
		shadow, limit = shadow || r.pol.Config().Shadow, r.policyLimit()
	}
	if !shadow {
		ds.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	s.stats.record(r.stat, r.hits, limit, 0, true, shadow)
	s.stats.recordLocalOver(r.stat, r.hits)
}
