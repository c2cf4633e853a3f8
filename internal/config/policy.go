package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"go.yaml.in/yaml/v3"
)

// Decoding and validation of named policies.

var policyFields = []string{"name", "algorithm", "limit", "window", "burst", "rate", "count_rejected",
	"on_failure", "shadow", "headers", "timeout", "description", "show_keys"}

// fieldsFor lists the fields each algorithm uses.
var fieldsFor = map[sluice.Algorithm][]string{
	sluice.AlgorithmFixedWindow:   {"limit", "window"},
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
		d.errorf(x.val, "policy %q: %s", p.Name, strings.TrimPrefix(err.Error(), sluice.ErrInvalidPolicy.Error()+": "))
		return nil
	}
	p.Algorithm = alg
	for _, name := range []string{"limit", "window", "burst", "rate", "count_rejected"} {
		if x, ok := f[name]; ok && !contains(fieldsFor[alg], name) {
			d.errorf(x.key, "policy %q: %s is not used by %v (it takes %s)", p.Name, name, alg, strings.Join(fieldsFor[alg], ", "))
		}
	}
	for _, name := range fieldsFor[alg] {
		if _, ok := f[name]; !ok && name != "count_rejected" {
			d.errorf(n, "policy %q: %s needs %s", p.Name, alg, name)
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
		case "allow", "open":
			p.FailMode = sluice.FailOpen
		case "deny", "closed":
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
	p.Params = sluice.Params{Limit: limit, Window: window, Rate: rate, Per: per, CountRejected: countRejected}
	pol, err := alg.Policy(p.Params)
	if err != nil {
		d.errorf(n, "policy %q: %s", p.Name, strings.TrimPrefix(err.Error(), sluice.ErrInvalidPolicy.Error()+": "))
		return nil
	}
	p.Policy = pol
	p.Limit = limit
	p.Limiter = p.Name + "." + alg.String()
	return p
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

// checkName validates a policy name: 1 to 48 of [A-Za-z0-9_.-].
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
