package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"go.yaml.in/yaml/v3"
)

// Decoding and validation of named policies.

var policyFields = []string{"name", "algorithm", "limit", "window", "period", "zone", "renewal_day",
	"burst", "rate", "count_rejected", "on_failure", "shadow", "headers", "timeout", "description", "show_keys",
	"overrides", "plans", "deny_cache"}

// fieldsFor lists the fields each algorithm uses.
var fieldsFor = map[sluice.Algorithm][]string{
	sluice.AlgorithmFixedWindow:   {"limit", "window", "period", "zone", "renewal_day"},
	sluice.AlgorithmSlidingWindow: {"limit", "window"},
	sluice.AlgorithmSlidingLog:    {"limit", "window", "count_rejected"},
	sluice.AlgorithmTokenBucket:   {"burst", "rate"},
	sluice.AlgorithmGCRA:          {"burst", "rate"},
}

func (d *decoder) policy(n *yaml.Node, c *Config, defaultTimeout time.Duration) *Policy {
	f := d.mapping(n, "policy", policyFields...)
	if f == nil {
		return nil
	}
	errsBefore := len(d.errs)
	p := &Policy{Line: n.Line, Headers: HeadersAll, Timeout: defaultTimeout}
	if x, ok := f["name"]; ok {
		p.Name = d.str(x.val, "policy name")
		if err := checkName(p.Name); err != nil {
			d.errorf(x.val, "policy name: %v", err)
		} else if c.Policy(p.Name) != nil {
			d.errorf(x.val, "policy name %q is already used at line %d", p.Name, c.Policy(p.Name).Line)
		}
	} else {
		d.errorf(n, "policy: name is missing")
	}
	x, ok := f["algorithm"]
	if !ok {
		d.errorf(n, "policy %q: algorithm is missing (fixed_window, sliding_log, sliding_window, token_bucket or gcra)", p.Name)
		return nil
	}
	alg, err := sluice.ParseAlgorithm(d.str(x.val, "algorithm"))
	if err != nil {
		d.errorf(x.val, "policy %q: %s", p.Name, sluice.Reason(err))
		return nil
	}
	p.Algorithm = alg
	for _, name := range []string{"limit", "window", "period", "zone", "renewal_day", "burst", "rate", "count_rejected"} {
		if x, ok := f[name]; ok && !contains(fieldsFor[alg], name) {
			d.errorf(x.key, "policy %q: %s is not used by %v (it takes %s)", p.Name, name, alg, strings.Join(fieldsFor[alg], ", "))
		}
	}
	for _, name := range fieldsFor[alg] {
		if _, ok := f[name]; !ok && !optionalFields[name] && !(alg == sluice.AlgorithmFixedWindow && name == "window") {
			d.errorf(n, "policy %q: %s needs %s", p.Name, alg, name)
		}
	}
	if alg == sluice.AlgorithmFixedWindow {
		_, w := f["window"]
		_, per := f["period"]
		if w == per {
			d.errorf(n, "policy %q: %s needs window (a duration) or period (day, week or month), one of them", p.Name, alg)
		}
	}
	get := func(name string) *yaml.Node {
		if x, ok := f[name]; ok {
			return x.val
		}
		return nil
	}
	var limit int64
	var window time.Duration
	var rate float64
	var per time.Duration
	if x := get("limit"); x != nil {
		limit, _ = d.integer(x, "limit", 1, 1<<40)
	}
	if x := get("burst"); x != nil {
		limit, _ = d.integer(x, "burst", 1, 1<<40)
	}
	if x := get("window"); x != nil {
		window = d.duration(x, "window", sluice.MinWindow, 400*24*time.Hour)
	}
	cal := d.calendar(f, p.Name)
	if x := get("rate"); x != nil {
		if s, ok := d.scalar(x, "rate"); ok {
			var err error
			rate, per, err = ParseRate(s)
			if err != nil {
				d.errorf(x, "%v", err)
			}
		}
	}
	countRejected := false
	if x := get("count_rejected"); x != nil {
		countRejected = d.boolean(x, "count_rejected")
	}
	if x := get("on_failure"); x != nil {
		switch s := d.str(x, "on_failure"); s {
		case "allow":
			p.FailMode = sluice.FailOpen
		case "deny":
			p.FailMode = sluice.FailClosed
		default:
			d.errorf(x, "on_failure must be allow or deny, got %q", s)
		}
	}
	if x := get("shadow"); x != nil {
		p.Shadow = d.boolean(x, "shadow")
	}
	if x := get("timeout"); x != nil {
		p.Timeout = d.duration(x, "timeout", time.Millisecond, time.Minute)
	}
	if x := get("description"); x != nil {
		p.Description = d.str(x, "description")
	}
	if x := get("headers"); x != nil {
		p.Headers = d.headers(x)
	}
	if x := get("show_keys"); x != nil {
		s := d.str(x, "show_keys")
		k, ok := keyDisplays[s]
		if !ok {
			d.errorf(x, "show_keys must be hashed, truncated or raw, got %q", s)
		}
		p.ShowKeys = k
	}
	if len(d.errs) > errsBefore {
		return nil
	}
	p.Params = sluice.Params{Limit: limit, Window: window, Rate: rate, Per: per, Calendar: cal, CountRejected: countRejected}
	pol, err := alg.Policy(p.Params)
	if err != nil {
		d.errorf(n, "policy %q: %s", p.Name, sluice.Reason(err))
		return nil
	}
	p.Policy = pol
	p.Limit = limit
	p.Limiter = p.Name + "." + alg.String()
	if x := get("overrides"); x != nil {
		p.Overrides = d.boolean(x, "overrides")
	}
	if x := get("plans"); x != nil {
		p.Plans = d.plans(x, p)
	}
	// The deny cache applies only where a refusal says what the store
	// would answer next: not under count_rejected, overrides or plans.
	never := ""
	switch {
	case countRejected:
		never = "count_rejected (refused attempts must reach Valkey to be counted)"
	case p.Overrides:
		never = "overrides (an override set anywhere must apply at once)"
	case len(p.Plans) > 0:
		never = "plans (a refusal under one plan says nothing of another)"
	}
	p.DenyCache = never == ""
	if x := get("deny_cache"); x != nil {
		if on := d.boolean(x, "deny_cache"); on && never != "" {
			d.errorf(x, "policy %q: deny_cache: true cannot apply with %s", p.Name, never)
		} else {
			p.DenyCache = on
		}
	}
	if len(d.errs) > errsBefore {
		return nil
	}
	return p
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
	limitField := "limit"
	allowed := []string{"limit"}
	if p.Algorithm.Rated() {
		limitField = "burst"
		allowed = []string{"burst", "rate"}
	}
	var out []Plan
	seen := map[string]bool{}
	for i := 0; i+1 < len(r.Content); i += 2 {
		k, v := r.Content[i], r.Content[i+1]
		name := d.str(k, "plan name")
		if err := checkName(name); err != nil {
			d.errorf(k, "policy %q: plan name: %v", p.Name, err)
			continue
		}
		if seen[name] {
			d.errorf(k, "policy %q: plan %q is given twice", p.Name, name)
			continue
		}
		seen[name] = true
		f := d.mapping(v, "plan "+name, allowed...)
		if f == nil {
			continue
		}
		params := p.Params
		x, ok := f[limitField]
		if !ok {
			d.errorf(v, "policy %q: plan %q needs %s", p.Name, name, limitField)
			continue
		}
		params.Limit, _ = d.integer(x.val, limitField, 1, 1<<40)
		if x, ok := f["rate"]; ok {
			if s, ok := d.scalar(x.val, "rate"); ok {
				rate, per, err := ParseRate(s)
				if err != nil {
					d.errorf(x.val, "%v", err)
					continue
				}
				params.Rate, params.Per = rate, per
			}
		}
		pol, err := p.Algorithm.Policy(params)
		if err != nil {
			d.errorf(v, "policy %q: plan %q: %s", p.Name, name, sluice.Reason(err))
			continue
		}
		out = append(out, Plan{Name: name, Policy: pol, Limit: params.Limit})
	}
	return out
}

// optionalFields are the fields an algorithm may go without (a fixed window
// takes a window or a period).
var optionalFields = map[string]bool{"count_rejected": true, "period": true, "zone": true, "renewal_day": true}

// calendar decodes a fixed window's calendar period: period (day, week or
// month), zone (an IANA time zone, required with a period) and
// renewal_day (1 to 31, months only, default 1).
func (d *decoder) calendar(f map[string]field, policy string) sluice.Calendar {
	var c sluice.Calendar
	x, ok := f["period"]
	if !ok {
		for _, name := range []string{"zone", "renewal_day"} {
			if y, ok := f[name]; ok {
				d.errorf(y.key, "policy %q: %s is for a calendar period: set period (day, week or month)", policy, name)
			}
		}
		return c
	}
	u, err := sluice.ParseCalendarUnit(d.str(x.val, "period"))
	if err != nil {
		d.errorf(x.val, "policy %q: period: %s", policy, sluice.Reason(err))
	}
	c.Unit = u
	if z, ok := f["zone"]; ok {
		name := d.str(z.val, "zone")
		loc, err := time.LoadLocation(name)
		if err != nil || name == "" || name == "Local" {
			d.errorf(z.val, "policy %q: zone: unknown time zone %q (want an IANA name such as Europe/Paris, or UTC)", policy, name)
		}
		c.Zone = loc
	} else {
		d.errorf(x.key, "policy %q: a period needs zone (an IANA time zone such as America/Los_Angeles, or UTC)", policy)
	}
	if r, ok := f["renewal_day"]; ok {
		if u != sluice.Month {
			d.errorf(r.key, "policy %q: renewal_day is only for period: month", policy)
		} else {
			day, _ := d.integer(r.val, "renewal_day", 1, 31)
			c.RenewalDay = int(day)
		}
	} else if u == sluice.Month {
		c.RenewalDay = 1
	}
	return c
}

func (d *decoder) headers(n *yaml.Node) Headers {
	r := d.resolve(n)
	if r == nil {
		return 0
	}
	known := "x-ratelimit, ietf, retry-after, all or none"
	one := func(x *yaml.Node) Headers {
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
		d.errorf(x, "headers: unknown %q (want %s)", s, known)
		return 0
	}
	if r.Kind == yaml.ScalarNode {
		return one(r)
	}
	var h Headers
	for _, x := range d.sequence(r, "headers") {
		h |= one(x)
	}
	return h
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checkName validates a policy name: 1 to maxPolicyName of [A-Za-z0-9_.-].
func checkName(name string) error {
	if name == "" || len(name) > maxPolicyName {
		return fmt.Errorf("must be 1 to %d characters, got %d", maxPolicyName, len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return fmt.Errorf("%q may hold only letters, digits, '_', '.' and '-'", name)
		}
	}
	return nil
}
