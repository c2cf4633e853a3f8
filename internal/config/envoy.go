package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"go.yaml.in/yaml/v3"
)

// The envoyproxy/ratelimit format: a domain with nested descriptors whose
// rate_limit entries become generated fixed-window policies.

var envoyDomainFields = []string{"domain", "descriptors"}

var envoyDescriptorFields = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode",
	"detailed_metric", "value_to_metric", "share_threshold", "policy"}

var envoyUnits = map[string]time.Duration{
	"second": time.Second, "minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour,
	"week": 7 * 24 * time.Hour, "month": 30 * 24 * time.Hour, "year": 365 * 24 * time.Hour,
}

func (d *decoder) domain(c *Config, n *yaml.Node, f map[string]field) *Domain {
	if f == nil {
		return nil
	}
	dom := &Domain{Line: n.Line}
	if x, ok := f["domain"]; ok {
		dom.Name = d.str(x.val, "domain")
		if dom.Name == "" {
			d.errorf(x.val, "domain must not be empty")
		} else if prev := c.Domain(dom.Name); prev != nil {
			d.errorf(x.val, "domain %q is already defined at line %d", dom.Name, prev.Line)
		}
	} else {
		d.errorf(n, "domain is missing")
	}
	if x, ok := f["descriptors"]; ok {
		dom.Descriptors = d.descriptors(c, dom, x.val, nil)
	}
	return dom
}

func (d *decoder) descriptors(c *Config, dom *Domain, n *yaml.Node, path []string) []*Descriptor {
	var out []*Descriptor
	for _, item := range d.sequence(n, "descriptors") {
		f := d.mapping(item, "descriptor", envoyDescriptorFields...)
		if f == nil {
			continue
		}
		desc := &Descriptor{Line: item.Line}
		if x, ok := f["key"]; ok {
			desc.Key = d.str(x.val, "descriptor key")
			if desc.Key == "" {
				d.errorf(x.val, "descriptor key must not be empty")
			}
		} else {
			d.errorf(item, "descriptor: key is missing")
		}
		if x, ok := f["value"]; ok {
			desc.Value = d.str(x.val, "descriptor value")
		}
		for _, prev := range out {
			if prev.Key == desc.Key && prev.Value == desc.Value {
				d.errorf(item, "descriptor %s=%q is already defined at line %d", desc.Key, desc.Value, prev.Line)
			}
		}
		if x, ok := f["shadow_mode"]; ok {
			desc.Shadow = d.boolean(x.val, "shadow_mode")
		}
		if x, ok := f["share_threshold"]; ok {
			desc.ShareThreshold = d.boolean(x.val, "share_threshold")
			if desc.ShareThreshold && !strings.HasSuffix(desc.Value, "*") {
				d.errorf(x.key, "share_threshold applies only to a wildcard value ending in '*'")
			}
		}
		for _, ignored := range []string{"detailed_metric", "value_to_metric"} {
			if x, ok := f[ignored]; ok {
				d.boolean(x.val, ignored) // accepted for compatibility; metrics are per policy
			}
		}
		here := append(append([]string(nil), path...), desc.Key+"="+desc.Value)
		rl, hasRL := f["rate_limit"]
		if x, ok := f["policy"]; ok {
			desc.Policy = d.str(x.val, "policy")
			if hasRL {
				d.errorf(x.key, "descriptor: set policy or rate_limit, not both")
			} else if p := c.Policy(desc.Policy); p == nil || p.Envoy {
				d.errorf(x.val, "descriptor: unknown policy %q (define it under policies, before domains)", desc.Policy)
			}
		}
		if hasRL {
			d.rateLimit(c, dom, desc, rl.val, here)
		}
		if x, ok := f["descriptors"]; ok {
			desc.Children = d.descriptors(c, dom, x.val, here)
		}
		out = append(out, desc)
	}
	return out
}

func (d *decoder) rateLimit(c *Config, dom *Domain, desc *Descriptor, n *yaml.Node, path []string) {
	f := d.mapping(n, "rate_limit", "unit", "requests_per_unit", "unit_multiplier", "unlimited", "name", "replaces")
	if f == nil {
		return
	}
	if x, ok := f["replaces"]; ok {
		d.errorf(x.key, "rate_limit: replaces is not supported by sluice; remove it or express the limit as its own descriptor")
	}
	if x, ok := f["unlimited"]; ok && d.boolean(x.val, "unlimited") {
		desc.Unlimited = true
		for _, other := range []string{"unit", "requests_per_unit", "unit_multiplier"} {
			if y, ok := f[other]; ok {
				d.errorf(y.key, "rate_limit: %s makes no sense with unlimited: true", other)
			}
		}
		return
	}
	var unit time.Duration
	if x, ok := f["unit"]; ok {
		s := d.str(x.val, "unit")
		unit = envoyUnits[strings.ToLower(s)]
		if unit == 0 {
			d.errorf(x.val, "rate_limit: unknown unit %q (want second, minute, hour, day, week, month or year)", s)
		}
	} else {
		d.errorf(n, "rate_limit: unit is missing")
	}
	var rpu int64
	if x, ok := f["requests_per_unit"]; ok {
		rpu, _ = d.integer(x.val, "requests_per_unit", 0, 1<<32-1)
	} else {
		d.errorf(n, "rate_limit: requests_per_unit is missing")
	}
	mult := int64(1)
	if x, ok := f["unit_multiplier"]; ok {
		mult, _ = d.integer(x.val, "unit_multiplier", 1, 1<<20)
	}
	label := ""
	if x, ok := f["name"]; ok {
		label = d.str(x.val, "rate_limit name")
	}
	if unit == 0 || mult == 0 {
		return
	}
	if rpu == 0 {
		desc.Deny = true
		return
	}
	window := unit * time.Duration(mult)
	p := &Policy{
		Algorithm: sluice.AlgorithmFixedWindow,
		Policy:    sluice.FixedWindow{Limit: rpu, Window: window},
		Params:    sluice.Params{Limit: rpu, Window: window},
		Limit:     rpu,
		Shadow:    desc.Shadow,
		Headers:   HeadersAll,
		Envoy:     true,
		Domain:    dom.Name,
		Line:      n.Line,
	}
	if c.Valkey != nil {
		p.Timeout = c.Valkey.Timeout
	}
	if _, err := p.Policy.Rule(); err != nil {
		d.errorf(n, "rate_limit: %s", strings.TrimPrefix(err.Error(), sluice.ErrInvalidPolicy.Error()+": "))
		return
	}
	p.Name = envoyName(c, dom.Name, path, label)
	p.Description = fmt.Sprintf("envoy domain %s: %s", dom.Name, strings.Join(path, " / "))
	p.Limiter = p.Name + "." + p.Algorithm.String()
	desc.Policy = p.Name
	c.Policies = append(c.Policies, p)
}

// envoyName derives a readable, unique policy name for an Envoy limit, such
// as "edge.remote_address.path_-foo"; a hash when the readable one is taken
// or too long.
func envoyName(c *Config, domain string, path []string, label string) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, p := range path {
		b.WriteByte('.')
		b.WriteString(strings.TrimSuffix(p, "="))
	}
	clean := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-' {
				return r
			}
			return '_'
		}, s)
	}
	name := clean(b.String())
	if label != "" && checkName(label) == nil && c.Policy(label) == nil {
		name = label
	}
	if checkName(name) == nil && c.Policy(name) == nil {
		return name
	}
	sum := sha256.Sum256([]byte(domain + "\x00" + strings.Join(path, "\x00")))
	return "envoy-" + hex.EncodeToString(sum[:10])
}
