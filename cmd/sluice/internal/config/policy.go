package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"go.yaml.in/yaml/v3"
)

// Decoding and validation of named policies.

// policy decodes one item of policies, in named steps: its name, its
// algorithm, the fields the algorithm takes (from the field table), the
// numbers that make the sluice policy, the options every policy takes, and
// what depends on the validated policy (overrides, plans, the deny cache).
func (d *decoder) policy(n *yaml.Node, c *Config, defaultTimeout time.Duration) *Policy {
	f := d.fields(n, "policy", policySection)
	if f == nil {
		return nil
	}
	errsBefore := len(d.errs)
	p := &Policy{Line: n.Line, Headers: HeadersAll, Timeout: defaultTimeout}
	p.Name = d.policyName(n, f, c)
	alg, ok := d.policyAlgorithm(n, f, p.Name)
	if !ok {
		return nil
	}
	p.Algorithm = alg
	d.algorithmFields(n, f, p.Name, alg)
	params := d.policyParams(f, p.Name)
	d.policyOptions(f, p)
	if len(d.errs) > errsBefore || !d.buildPolicy(n, p, params) {
		return nil
	}
	d.policyExtras(f, p)
	if len(d.errs) > errsBefore {
		return nil
	}
	return p
}

// policyName decodes the policy's name, which must be valid and unused.
func (d *decoder) policyName(n *yaml.Node, f map[string]field, c *Config) string {
	x, name, ok := d.requiredString(n, f, "name", "policy name", "policy: name is missing")
	if !ok {
		return ""
	}
	if err := checkName(name); err != nil {
		d.errorf(x.val, "policy name: %v", err)
	} else if prev := c.Policy(name); prev != nil {
		d.errorf(x.val, "policy name %q is already used at line %d", name, prev.Line)
	}
	return name
}

// policyAlgorithm decodes the policy's algorithm, which is required.
func (d *decoder) policyAlgorithm(n *yaml.Node, f map[string]field, name string) (driver.Algorithm, bool) {
	x, ok := f["algorithm"]
	if !ok {
		d.errorf(n, "policy %q: algorithm is missing (fixed_window, sliding_log, sliding_window, token_bucket, gcra or in_flight)", name)
		return 0, false
	}
	alg, err := driver.ParseAlgorithm(d.str(x.val, "algorithm"))
	if err != nil {
		d.errorf(x.val, "policy %q: %s", name, sluice.Reason(err))
		return 0, false
	}
	return alg, true
}

// algorithmFields refuses the fields alg does not take and reports those
// it needs that are missing, as the field table says.
func (d *decoder) algorithmFields(n *yaml.Node, f map[string]field, name string, alg driver.Algorithm) {
	takes := fieldsFor(policySection, alg)
	for _, row := range policySection.Fields {
		if x, ok := f[row.Name]; ok && !row.takes(alg) && row.Name == "grants" {
			d.errorf(x.key, "policy %q: grants: %s", name, sluice.Reason(driver.Grantable(driver.Rule{Algorithm: alg})))
		} else if ok && !row.takes(alg) {
			d.errorf(x.key, "policy %q: %s is not used by %v (it takes %s)", name, row.Name, alg, strings.Join(takes, ", "))
		}
	}
	for _, row := range policySection.Fields {
		if _, ok := f[row.Name]; !ok && row.requiredBy(alg) {
			d.errorf(n, "policy %q: %s needs %s", name, alg, row.Name)
		}
	}
	if alg == driver.AlgorithmFixedWindow {
		d.windowOrPeriod(n, f, name, alg)
	}
}

// windowOrPeriod reports a fixed window that sets both or neither of
// window and period.
func (d *decoder) windowOrPeriod(n *yaml.Node, f map[string]field, name string, alg fmt.Stringer) {
	_, w := f["window"]
	_, per := f["period"]
	if w == per {
		d.errorf(n, "policy %q: %s needs window (a duration) or period (day, week or month), one of them", name, alg)
	}
}

// policyParams decodes the numbers of the policy: limit or burst, window
// or calendar period, rate, count_rejected.
func (d *decoder) policyParams(f map[string]field, name string) driver.Params {
	var params driver.Params
	for _, key := range []string{"limit", "burst"} {
		if x, ok := f[key]; ok {
			params.Limit, _ = d.intField(x.val, key, policySection.Field(key))
		}
	}
	if x, ok := f["window"]; ok {
		params.Window = d.durationField(x.val, "window", policySection.Field("window"))
	}
	params.Calendar = d.calendar(f, name)
	if x, ok := f["rate"]; ok {
		params.Rate, params.Per, _ = d.rate(x.val)
	}
	if x, ok := f["count_rejected"]; ok {
		params.CountRejected = d.boolean(x.val, "count_rejected")
	}
	if x, ok := f["lease"]; ok {
		params.Lease = d.durationField(x.val, "lease", policySection.Field("lease"))
	}
	return params
}

// rate decodes a rate such as 5/s (see ParseRate).
func (d *decoder) rate(n *yaml.Node) (float64, time.Duration, bool) {
	s, ok := d.scalar(n, "rate")
	if !ok {
		return 0, 0, true
	}
	rate, per, err := ParseRate(s)
	if err != nil {
		d.errorf(n, "%v", err)
		return 0, 0, false
	}
	return rate, per, true
}

// policyOptions decodes the fields every algorithm takes that do not make
// the sluice policy: on_failure, shadow, timeout, description, headers,
// show_keys.
func (d *decoder) policyOptions(f map[string]field, p *Policy) {
	decodeFields(d, f, p, policyOptionDecoders)
	d.beyondOptions(f, p)
}

// policyOptionDecoders decode the options of policyOptions.
var policyOptionDecoders = []fieldDecoder[*Policy]{
	{"on_failure", (*decoder).onFailure},
	{"shadow", func(d *decoder, p *Policy, n *yaml.Node) { p.Shadow = d.boolean(n, "shadow") }},
	{"timeout", func(d *decoder, p *Policy, n *yaml.Node) {
		p.Timeout = d.durationField(n, "timeout", policySection.Field("timeout"))
	}},
	{"description", func(d *decoder, p *Policy, n *yaml.Node) { p.Description = d.str(n, "description") }},
	{"headers", func(d *decoder, p *Policy, n *yaml.Node) { p.Headers = d.headers(n) }},
	{"show_keys", (*decoder).showKeys},
}

// onFailure decodes on_failure into p: allow (fail open), deny (fail
// closed) or share (sluice.FailShare, with grants).
func (d *decoder) onFailure(p *Policy, n *yaml.Node) {
	switch s := d.str(n, "on_failure"); s {
	case "allow":
		p.FailMode = sluice.FailOpen
	case "deny":
		p.FailMode = sluice.FailClosed
	case "share":
		p.FailMode = sluice.FailShare // needs grants: checked by grants
	default:
		d.errorf(n, "on_failure must be allow, deny or share (with grants), got %q", s)
	}
}

// showKeys decodes show_keys into p: hashed, truncated or raw.
func (d *decoder) showKeys(p *Policy, n *yaml.Node) {
	s := d.str(n, "show_keys")
	k, ok := keyDisplays[s]
	if !ok {
		d.errorf(n, "show_keys must be hashed, truncated or raw, got %q", s)
	}
	p.ShowKeys = k
}

// buildPolicy makes the sluice policy of params, reporting what the
// library refuses.
func (d *decoder) buildPolicy(n *yaml.Node, p *Policy, params driver.Params) bool {
	p.Params = params
	pol, err := sluice.PolicyOf(p.Algorithm, params)
	if err != nil {
		d.errorf(n, "policy %q: %s", p.Name, sluice.Reason(err))
		return false
	}
	p.Policy = pol
	p.Limit = params.Limit
	p.Limiter = p.Name + "." + p.Algorithm.String()
	return true
}

// policyExtras decodes what needs the validated policy: overrides, plans,
// max_debt, wait, and the deny cache, which applies only where a refusal says what the
// store would answer next: not under count_rejected, overrides or plans.
func (d *decoder) policyExtras(f map[string]field, p *Policy) {
	if x, ok := f["overrides"]; ok {
		p.Overrides = d.boolean(x.val, "overrides")
	}
	if x, ok := f["plans"]; ok {
		p.Plans = d.plans(x.val, p)
	}
	if x, ok := f["max_debt"]; ok {
		if v, ok := d.intField(x.val, "max_debt", policySection.Field("max_debt")); ok {
			p.MaxDebt = &v
		}
	}
	d.waitOption(f, p)
	d.grants(f, p)
	never := p.denyCacheNever()
	p.DenyCache = never == ""
	if x, ok := f["deny_cache"]; ok {
		d.denyCache(x.val, p, never)
	}
}

// denyCacheNever names the setting of p under which a deny cache cannot
// apply, with the reason; "" when it can.
func (p *Policy) denyCacheNever() string {
	switch {
	case p.Algorithm == driver.AlgorithmInFlight:
		return "in_flight (a release may free a slot at any time)"
	case p.Params.CountRejected:
		return "count_rejected (refused attempts must reach Valkey to be counted)"
	case p.Overrides:
		return "overrides (an override set anywhere must apply at once)"
	case len(p.Plans) > 0:
		return "plans (a refusal under one plan says nothing of another)"
	case p.Grants:
		return "grants (a process refuses locally against its grant already)"
	}
	return ""
}

// denyCache decodes deny_cache into p, refusing true where the setting
// never forbids it.
func (d *decoder) denyCache(n *yaml.Node, p *Policy, never string) {
	if on := d.boolean(n, "deny_cache"); on && never != "" {
		d.errorf(n, "policy %q: deny_cache: true cannot apply with %s", p.Name, never)
	} else {
		p.DenyCache = on
	}
}

// plans decodes a policy's plans: a mapping of plan names to the numbers
// that differ from the policy's, limit (or burst) and, for token_bucket
// and gcra, rate. Everything else is the policy's.
func (d *decoder) plans(n *yaml.Node, p *Policy) []Plan {
	r := d.resolve(n)
	if r == nil {
		return nil
	}
	if r.Kind != yaml.MappingNode {
		d.errorf(r, "policy %q: plans must be a mapping of plan names to their limits, got %s", p.Name, describe(r))
		return nil
	}
	limitField := planLimitField(p)
	allowed := fieldsFor(plansSection, p.Algorithm)
	var out []Plan
	seen := map[string]bool{}
	for i := 0; i+1 < len(r.Content); i += 2 {
		k, v := r.Content[i], r.Content[i+1]
		name, ok := d.planName(k, p, seen)
		if !ok {
			continue
		}
		if plan, ok := d.plan(v, p, name, limitField, allowed); ok {
			out = append(out, plan)
		}
	}
	return out
}

// planLimitField is the field of a plan of p that holds its limit: burst
// for the rated algorithms, else limit.
func planLimitField(p *Policy) string {
	if p.Algorithm.Rated() {
		return "burst"
	}
	return "limit"
}

// planName decodes the name k of a plan of p, which must be a valid name
// not in seen; it adds it to seen.
func (d *decoder) planName(k *yaml.Node, p *Policy, seen map[string]bool) (string, bool) {
	name := d.str(k, "plan name")
	if err := checkName(name); err != nil {
		d.errorf(k, "policy %q: plan name: %v", p.Name, err)
		return "", false
	}
	if seen[name] {
		d.errorf(k, "policy %q: plan %q is given twice", p.Name, name)
		return "", false
	}
	seen[name] = true
	return name, true
}

// plan decodes the plan name of p from v, which holds the fields allowed
// for p's algorithm: limitField (required) and, for rated algorithms,
// rate; the rest of the plan's parameters are p's.
func (d *decoder) plan(v *yaml.Node, p *Policy, name, limitField string, allowed []string) (Plan, bool) {
	f := d.mapping(v, "plan "+name, allowed...)
	if f == nil {
		return Plan{}, false
	}
	params := p.Params
	x, ok := f[limitField]
	if !ok {
		d.errorf(v, "policy %q: plan %q needs %s", p.Name, name, limitField)
		return Plan{}, false
	}
	params.Limit, _ = d.intField(x.val, limitField, plansSection.Field(limitField))
	if x, ok := f["rate"]; ok && !d.planRate(x.val, &params) {
		return Plan{}, false
	}
	pol, err := sluice.PolicyOf(p.Algorithm, params)
	if err != nil {
		d.errorf(v, "policy %q: plan %q: %s", p.Name, name, sluice.Reason(err))
		return Plan{}, false
	}
	return Plan{Name: name, Policy: pol, Limit: params.Limit}, true
}

// planRate decodes a plan's rate into params, when it sets one; false
// when it is not a rate.
func (d *decoder) planRate(n *yaml.Node, params *driver.Params) bool {
	rate, per, ok := d.rate(n)
	if ok && rate != 0 {
		params.Rate, params.Per = rate, per
	}
	return ok
}

// calendar decodes a fixed window's calendar period: period (day, week or
// month), zone (an IANA time zone, required with a period) and
// renewal_day (1 to 31, months only, default 1).
func (d *decoder) calendar(f map[string]field, policy string) sluice.Calendar {
	var c sluice.Calendar
	x, ok := f["period"]
	if !ok {
		d.noPeriod(f, policy)
		return c
	}
	u, err := driver.ParseCalendarUnit(d.str(x.val, "period"))
	if err != nil {
		d.errorf(x.val, "policy %q: period: %s", policy, sluice.Reason(err))
	}
	c.Unit = u
	if z, ok := f["zone"]; ok {
		c.Zone = d.zone(z.val, policy)
	} else {
		d.errorf(x.key, "policy %q: a period needs zone (an IANA time zone such as America/Los_Angeles, or UTC)", policy)
	}
	c.RenewalDay = d.renewalDay(f, u == sluice.Month, policy)
	return c
}

// noPeriod reports the calendar fields set without a period.
func (d *decoder) noPeriod(f map[string]field, policy string) {
	for _, name := range []string{"zone", "renewal_day"} {
		if y, ok := f[name]; ok {
			d.errorf(y.key, "policy %q: %s is for a calendar period: set period (day, week or month)", policy, name)
		}
	}
}

// renewalDay decodes the renewal_day of a period (month: whether it is
// a month): months only, default 1 (0 for other periods).
func (d *decoder) renewalDay(f map[string]field, month bool, policy string) int {
	r, ok := f["renewal_day"]
	switch {
	case !ok && month:
		return 1
	case !ok:
		return 0
	case !month:
		d.errorf(r.key, "policy %q: renewal_day is only for period: month", policy)
		return 0
	}
	day, _ := d.intField(r.val, "renewal_day", policySection.Field("renewal_day"))
	return int(day)
}

// zone decodes a calendar period's zone: an IANA time zone name (not
// Local, which depends on the machine).
func (d *decoder) zone(n *yaml.Node, policy string) *time.Location {
	name := d.str(n, "zone")
	loc, err := time.LoadLocation(name)
	if err != nil || name == "" || name == "Local" {
		d.errorf(n, "policy %q: zone: unknown time zone %q (want an IANA name such as Europe/Paris, or UTC)", policy, name)
	}
	return loc
}

func (d *decoder) headers(n *yaml.Node) Headers {
	r := d.resolve(n)
	if r == nil {
		return 0
	}
	if r.Kind == yaml.ScalarNode {
		return d.headerSet(r)
	}
	var h Headers
	for _, x := range d.sequence(r, "headers") {
		h |= d.headerSet(x)
	}
	return h
}

// headerSet decodes one value of headers: all, none, or one set's name.
func (d *decoder) headerSet(x *yaml.Node) Headers {
	s := d.str(x, "headers")
	switch s {
	case "all":
		return HeadersAll
	case "none":
		return HeadersNone
	}
	for _, h := range headerNames {
		if h.name == s {
			return h.h
		}
	}
	d.errorf(x, "headers: unknown %q (want x-ratelimit, ietf, retry-after, all or none)", s)
	return 0
}

// checkName validates a policy name: 1 to maxPolicyName of [A-Za-z0-9_.-],
// not "." nor "..", which a URL path naming the policy (such as
// /v1/forward-auth/nginx/refused/{policy}) would read as a dot segment.
func checkName(name string) error {
	if name == "" || len(name) > maxPolicyName {
		return fmt.Errorf("must be 1 to %d characters, got %d", maxPolicyName, len(name))
	}
	if name == "." || name == ".." {
		return fmt.Errorf("%q: \".\" and \"..\" are not names (a URL path naming the policy would read them as a dot segment)", name)
	}
	for i := 0; i < len(name); i++ {
		if !nameChar(rune(name[i])) {
			return fmt.Errorf("%q may hold only letters, digits, '_', '.' and '-'", name)
		}
	}
	return nil
}

// nameChar reports whether a policy name may hold r: an ASCII letter or
// digit, '_', '.' or '-'.
func nameChar(r rune) bool {
	return strings.ContainsRune(nameChars, r)
}

// nameChars are the characters nameChar accepts.
const nameChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-"
