package envoy

import (
	"fmt"
	"math"
	"slices"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/driver"
)

// Resolving a ShouldRateLimit request: each descriptor to the limit that
// applies to it, as envoyproxy/ratelimit builds its list of limits to check
// before deciding any (its constructLimitsToCheck).

// limitKind is what applies to one descriptor.
type limitKind uint8

const (
	kindNone      limitKind = iota // no limit: OK
	kindUnlimited                  // unlimited: OK, remaining at its maximum
	kindDeny                       // requests_per_unit 0: refused
	kindLimit                      // a limit to decide
)

// resolved is one descriptor's limit.
type resolved struct {
	kind limitKind
	// pol is the policy of kindLimit.
	pol Policy
	// key is what the descriptor is counted under (its domain and entries).
	key string
	// plan is the policy's plan a plan_entry named ("" for none).
	plan string
	// hits is the descriptor's cost: its hits_addend, else the request's,
	// else 1.
	hits uint64
	// refund: is_negative_hits, the hits are given back.
	refund bool
	// shadow: decided, never refused (shadow_mode; never for overrides).
	shadow bool
	quota  bool
	// limit describes the limit in answers; nil for a named sluice policy
	// (its own description is used) and for kindNone.
	limit *config.EnvoyLimit
	// node is the matched descriptor of the tree, nil for an override or no
	// match; stat labels its metrics.
	node *config.Descriptor
	stat statKey
	// peek, for a descriptor of an envoyproxy/ratelimit limit asking 0
	// hits, is the same counter under a limit one higher: its check (cost
	// 0) is allowed while count <= limit, upstream's "over the limit only
	// when count + hits > limit", where a check under the limit itself is
	// allowed only while count < limit. Its Remaining is one more than the
	// limit's.
	peek Policy
	// localKey names the counter in the local cache (LOCAL_CACHE_SIZE_IN_BYTES)
	// until localUntil, the end of its window; localOver: found there
	// over its limit, so decided without the store.
	localKey   string
	localUntil time.Time
	localOver  bool
}

// hitsOf returns the cost of descriptor d, as envoyproxy/ratelimit counts
// it: its own hits_addend when set (0 included), else the request's, with
// 0 meaning 1.
func hitsOf(req *rlsv3.RateLimitRequest, d *commonrl.RateLimitDescriptor) uint64 {
	if h := d.GetHitsAddend(); h != nil {
		return h.GetValue()
	}
	return max(1, uint64(req.GetHitsAddend()))
}

var overrideUnits = map[typev3.RateLimitUnit]struct {
	d    time.Duration
	name string
}{
	typev3.RateLimitUnit_SECOND: {time.Second, "SECOND"}, typev3.RateLimitUnit_MINUTE: {time.Minute, "MINUTE"},
	typev3.RateLimitUnit_HOUR: {time.Hour, "HOUR"}, typev3.RateLimitUnit_DAY: {24 * time.Hour, "DAY"},
	typev3.RateLimitUnit_MONTH: {30 * 24 * time.Hour, "MONTH"}, typev3.RateLimitUnit_YEAR: {365 * 24 * time.Hour, "YEAR"},
}

// inputError is a request that cannot be decided as sent: the call is
// answered INVALID_ARGUMENT.
type inputError struct{ msg string }

func (e *inputError) Error() string { return e.msg }

// resolve finds the limit of every descriptor of a request for a known
// domain dom, appended to buf (used when it has the room: the caller's
// buffer on its stack). The only error is an inputError.
func (s *Service) resolve(st State, dom *config.Domain, req *rlsv3.RateLimitRequest, buf []resolved) ([]resolved, error) {
	descs := req.GetDescriptors()
	out := slices.Grow(buf[:0], len(descs))[:len(descs)]
	clear(out)
	// Every descriptor's entries in one slice, and one path buffer
	// reused by each descriptor's walk.
	n := 0
	for _, d := range descs {
		n += len(d.GetEntries())
	}
	all := make([]config.Entry, 0, n)
	var pathArr [smallCall]*config.Descriptor
	pathBuf := pathArr[:0]
	for i, d := range descs {
		r := &out[i]
		r.hits = hitsOf(req, d)
		r.quota = s.opts.QuotaMode
		r.refund = d.GetIsNegativeHits()
		start := len(all)
		for _, e := range d.GetEntries() {
			all = append(all, config.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		entries := all[start:len(all):len(all)]
		if ov := d.GetLimit(); ov != nil {
			if err := s.resolveOverride(st, dom, r, ov, entries); err != nil {
				return nil, &inputError{fmt.Sprintf("descriptor %d: limit override: %v", i, err)}
			}
			continue
		}
		path := dom.WalkInto(pathBuf[:0], entries)
		if path == nil {
			continue
		}
		pathBuf = path
		if err := s.resolveMatch(st, dom, r, path, entries); err != nil {
			return nil, &inputError{fmt.Sprintf("descriptor %d: %v", i, err)}
		}
	}
	applyReplaces(out)
	for i := range out {
		if err := s.resolvePeek(st, dom, &out[i]); err != nil {
			return nil, &inputError{fmt.Sprintf("descriptor %d: %v", i, err)}
		}
	}
	return out, nil
}

// resolvePeek sets r.peek for a descriptor of an envoyproxy/ratelimit
// limit (configured or a per-request override) asking 0 hits.
func (s *Service) resolvePeek(st State, dom *config.Domain, r *resolved) error {
	if r.kind != kindLimit || r.hits != 0 || r.refund || r.limit == nil || r.plan != "" || !r.pol.Config().Envoy {
		return nil
	}
	p, err := st.Override(r.policyLimit()+1, r.limit.Window, dom.Counting)
	if err != nil {
		return fmt.Errorf("checking with 0 hits: %w", err)
	}
	r.peek = p
	return nil
}

// resolveMatch sets r to the limit of the matched descriptor, the last of
// path: unlimited, requests_per_unit 0, or a policy (none when the policy
// is unknown). The only error is a plan entry naming no plan of its policy.
func (s *Service) resolveMatch(st State, dom *config.Domain, r *resolved, path []*config.Descriptor, entries []config.Entry) error {
	node := path[len(path)-1]
	r.node, r.shadow, r.quota, r.limit = node, node.Shadow, node.QuotaMode || r.quota, node.Limit
	r.stat = s.stats.configKey(dom.Name, path, entries)
	switch {
	case node.Unlimited:
		r.kind = kindUnlimited
	case node.Deny:
		r.kind = kindDeny
	case node.Policy != "":
		r.pol = st.Policy(node.Policy)
		if r.pol == nil {
			return nil
		}
		r.kind = kindLimit
		r.key, r.plan = CountedKey(dom.Name, path, entries)
		if node.PlanEntry {
			if _, ok := r.pol.Limiter().PlanRule(r.plan); !ok {
				return fmt.Errorf("plan %q is not a plan of policy %q (it has %v)", r.plan, r.pol.Config().Name, r.pol.Limiter().Plans())
			}
		}
		if !r.pol.Config().Envoy {
			r.limit = nil // a named policy answers with its own description
		}
	}
	return nil
}

// resolveOverride applies a per-request limit to a descriptor of a known
// domain, matched or not, as envoyproxy/ratelimit does: the override
// replaces whatever the tree says (unlimited included), is never in shadow
// mode, and counts under the descriptor's own entries.
func (s *Service) resolveOverride(st State, dom *config.Domain, r *resolved, ov *commonrl.RateLimitDescriptor_RateLimitOverride, entries []config.Entry) error {
	u, ok := overrideUnits[ov.GetUnit()]
	if !ok {
		return fmt.Errorf("unknown unit %v", ov.GetUnit())
	}
	mult := int64(1)
	if m := ov.GetUnitMultiplier(); m != nil && m.GetValue() > 0 {
		mult = int64(m.GetValue())
	}
	window := u.d * time.Duration(mult)
	if window > driver.MaxWindow {
		return fmt.Errorf("unit_multiplier %d makes a window over 400 days", mult)
	}
	r.limit = &config.EnvoyLimit{Unit: u.name, Multiplier: mult, RequestsPerUnit: int64(ov.GetRequestsPerUnit()), Window: window}
	r.stat = s.stats.overrideKey(dom.Name, entries)
	if ov.GetRequestsPerUnit() == 0 {
		r.kind = kindDeny
		return nil
	}
	p, err := st.Override(int64(ov.GetRequestsPerUnit()), window, dom.Counting)
	if err != nil {
		return err
	}
	r.kind, r.pol, r.key = kindLimit, p, identity(dom.Name, entries)
	return nil
}

// applyReplaces drops the limits named in another applying limit's
// replaces list (rate_limit.replaces).
func applyReplaces(rs []resolved) {
	replaced := replacedNames(rs)
	if replaced == nil {
		return
	}
	for i := range rs {
		r := &rs[i]
		if (r.kind == kindLimit || r.kind == kindDeny) && r.limit != nil && r.limit.Name != "" && replaced[r.limit.Name] {
			*r = resolved{hits: r.hits}
		}
	}
}

// replacedNames is the set of the limits that the applying limits of rs
// replace; nil when none replaces any (the common case, without an
// allocation).
func replacedNames(rs []resolved) map[string]bool {
	var replaced map[string]bool
	for _, r := range rs {
		if r.limit != nil && len(r.limit.Replaces) > 0 && r.kind != kindNone {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			for _, n := range r.limit.Replaces {
				replaced[n] = true
			}
		}
	}
	return replaced
}

// CountedKey returns the key a descriptor of domain that matched path
// (Domain.Walk) is counted under, and the plan its last entry names when
// the matched descriptor is a plan entry (else ""): the domain and every
// key and value it is counted as (config.CountedAs; a plan entry left
// out), joined by sluice.Identity, which escapes ':' and '\' with '\',
// such as edge:api_key:key_abc. sluice explain and sluice key print it.
func CountedKey(domain string, path []*config.Descriptor, entries []config.Entry) (key, plan string) {
	counted := config.CountedAs(path, entries)
	if len(path) > 0 && path[len(path)-1].PlanEntry {
		plan = entries[len(entries)-1].Value
		counted = counted[:len(counted)-1]
	}
	return identity(domain, counted), plan
}

// identity is the key a descriptor is counted under: its domain and every
// entry, escaped so distinct descriptors never share a key.
func identity(domain string, entries []config.Entry) string {
	var buf [9]string // up to four entries without an allocation
	parts := buf[:0]
	parts = append(parts, domain)
	for _, e := range entries {
		parts = append(parts, e.Key, e.Value)
	}
	return sluice.Identity(parts...)
}

// cost is the descriptor's cost for the store, within its limit: a cost
// above the limit (never allowed) counts as the whole limit, which fills
// the window as envoyproxy/ratelimit's count would.
func (r *resolved) cost() int64 {
	c := int64(min(r.hits, math.MaxInt64))
	if r.refund {
		if !r.pol.Config().Algorithm.GivesBackUntaken() {
			return 0 // only a fixed window can give back without its take: look
		}
		return -min(c, r.policyLimit())
	}
	return min(c, r.policyLimit())
}

// policyLimit is the limit of the descriptor's policy under its plan.
func (r *resolved) policyLimit() int64 {
	if rule, ok := r.pol.Limiter().PlanRule(r.plan); ok {
		return rule.Limit
	}
	return r.pol.Config().Limit
}
