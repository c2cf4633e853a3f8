package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"go.yaml.in/yaml/v3"
)

// The envoyproxy/ratelimit format: a domain with nested descriptors whose
// rate_limit entries become generated fixed-window policies.

// Domain is an Envoy rate-limit domain: a tree of descriptors.
type Domain struct {
	Name        string
	Descriptors []*Descriptor
	// File is the file that defines it (the first, when merged).
	File string
	// Counting says how the limits of one request's descriptors count.
	Counting Counting
	Line     int
}

// Counting says how the limits of one request's descriptors count.
type Counting uint8

const (
	// CountEach: each descriptor counts its own hits, refused ones
	// included, whatever the others decide (envoyproxy/ratelimit's way,
	// the default for its format).
	CountEach Counting = iota + 1
	// CountAllOrNothing: a request refused by one descriptor takes nothing
	// from the others (the default for domains in sluice's own format).
	CountAllOrNothing
)

// String returns the configuration name: "each" or "all_or_nothing".
func (c Counting) String() string {
	if c == CountAllOrNothing {
		return "all_or_nothing"
	}
	return "each"
}

// Descriptor is one node of a domain's tree: a key, optionally a value (a
// value with '*' matches by wildcard; no value matches any value), and
// what applies to requests whose descriptor ends here.
type Descriptor struct {
	Key, Value string
	// Policy names the policy that applies, "" when none.
	Policy string
	// Unlimited descriptors are always allowed.
	Unlimited bool
	// Deny refuses every request (requests_per_unit: 0); Limit describes it.
	Deny bool
	// Limit is the rate_limit as written (nil without one, or with a named
	// policy).
	Limit *EnvoyLimit
	// Shadow: the limit is observed, never enforced (shadow_mode).
	Shadow bool
	// QuotaMode: refusals of quota descriptors refuse the request only when
	// every quota descriptor of it refuses (quota_mode).
	QuotaMode bool
	// ShareThreshold: all values matching a wildcard value share one counter.
	ShareThreshold bool
	// PlanEntry: the request's value of this entry names the plan of the
	// descriptor's policy, and is not part of the key it counts under (a
	// key keeps its count across plans).
	PlanEntry bool
	// DetailedMetric: its metrics are labelled with the request's values
	// (detailed_metric); ValueToMetric: with the request's value at this
	// level (value_to_metric).
	DetailedMetric, ValueToMetric bool
	// Metadata is the descriptor's metadata, for dynamic metadata answers.
	Metadata map[string]any
	Children []*Descriptor
	Line     int
	// wildcard is Value split at each '*', nil when it has none.
	wildcard []string
}

// StatName is the descriptor's part of its metrics' key: "key_value", or
// "key" without a value, as envoyproxy/ratelimit names its statistics.
func (d *Descriptor) StatName() string {
	if d.Value == "" {
		return d.Key
	}
	return d.Key + "_" + d.Value
}

// EnvoyLimit is an envoyproxy/ratelimit rate_limit: RequestsPerUnit per
// Multiplier Units.
type EnvoyLimit struct {
	// Name is rate_limit.name, "" when unnamed.
	Name string
	// Unit is SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR.
	Unit            string
	Multiplier      int64
	RequestsPerUnit int64
	// Window is Multiplier Units (a month is 30 days, a year 365).
	Window time.Duration
	// Replaces names the limits this one replaces when both apply to one
	// request.
	Replaces []string
}

var envoyUnits = map[string]time.Duration{
	"second": time.Second, "minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour,
	"week": 7 * 24 * time.Hour, "month": 30 * 24 * time.Hour, "year": 365 * 24 * time.Hour,
}

// domain decodes one domain; envoyFormat says it is a file of
// envoyproxy/ratelimit's format, which sets the default counting.
func (d *decoder) domain(c *Config, n *yaml.Node, f map[string]field, envoyFormat bool) *Domain {
	if f == nil {
		return nil
	}
	dom := &Domain{Line: n.Line, File: d.file, Counting: CountAllOrNothing}
	if envoyFormat {
		dom.Counting = CountEach
	}
	dom.Name = d.domainName(n, f, c)
	if x, ok := f["counting"]; ok {
		dom.Counting = d.counting(x.val, dom.Counting)
	}
	if x, ok := f["descriptors"]; ok {
		dom.Descriptors = d.descriptors(c, dom, x.val, nil)
	}
	return dom
}

// domainName decodes a domain's name, which must be set, not empty and
// unused.
func (d *decoder) domainName(n *yaml.Node, f map[string]field, c *Config) string {
	x, name, ok := d.requiredString(n, f, "domain", "domain", "domain is missing")
	if !ok {
		return ""
	}
	if name == "" {
		d.errorf(x.val, "domain must not be empty")
	} else if prev := c.Domain(name); prev != nil {
		d.errorf(x.val, "domain %q is already defined at %s:%d", name, prev.File, prev.Line)
	}
	return name
}

// countings are the values of a domain's counting.
var countings = map[string]Counting{"each": CountEach, "all_or_nothing": CountAllOrNothing}

// counting decodes a domain's counting; def when it is not one.
func (d *decoder) counting(n *yaml.Node, def Counting) Counting {
	s := d.str(n, "counting")
	c, ok := countings[s]
	if !ok {
		d.errorf(n, "counting must be each or all_or_nothing, got %q", s)
		return def
	}
	return c
}

func (d *decoder) descriptors(c *Config, dom *Domain, n *yaml.Node, path []string) []*Descriptor {
	return d.moreDescriptors(c, dom, n, path, nil)
}

// moreDescriptors decodes descriptors to go beside existing ones (a merged
// domain's), refusing duplicates of them.
func (d *decoder) moreDescriptors(c *Config, dom *Domain, n *yaml.Node, path []string, existing []*Descriptor) []*Descriptor {
	out := existing
	for _, item := range d.sequence(n, "descriptors") {
		if desc := d.descriptor(c, dom, item, path, out); desc != nil {
			out = append(out, desc)
		}
	}
	return out
}

// descriptor decodes one descriptor found under path (the entries of its
// ancestors), beside siblings; nil when item is not a mapping.
func (d *decoder) descriptor(c *Config, dom *Domain, item *yaml.Node, path []string, siblings []*Descriptor) *Descriptor {
	f := d.fields(item, "descriptor", descriptorSection)
	if f == nil {
		return nil
	}
	desc := &Descriptor{Line: item.Line}
	d.descriptorEntry(item, f, desc)
	d.refuseDuplicate(item, desc, siblings)
	d.descriptorOptions(f, desc)
	here := append(append([]string(nil), path...), desc.Key+"="+desc.Value)
	d.descriptorLimit(c, dom, f, desc, here)
	d.planEntry(c, f, desc)
	if x, ok := f["descriptors"]; ok {
		desc.Children = d.descriptors(c, dom, x.val, here)
	}
	return desc
}

// descriptorEntry decodes the entry a descriptor matches: its key (required,
// without '*') and its value (a '*' in it makes it a wildcard).
func (d *decoder) descriptorEntry(item *yaml.Node, f map[string]field, desc *Descriptor) {
	if x, ok := f["key"]; ok {
		desc.Key = d.str(x.val, "descriptor key")
		if desc.Key == "" {
			d.errorf(x.val, "descriptor key must not be empty")
		} else if strings.Contains(desc.Key, "*") {
			d.errorf(x.val, "descriptor key %q: a '*' in a key is not supported (wildcards go in the value)", desc.Key)
		}
	} else {
		d.errorf(item, "descriptor: key is missing")
	}
	desc.Value = d.optString(f, "value", "descriptor value")
	if strings.Contains(desc.Value, "*") {
		desc.wildcard = strings.Split(desc.Value, "*")
	}
}

// refuseDuplicate reports a descriptor whose key and value one of its
// siblings already has.
func (d *decoder) refuseDuplicate(item *yaml.Node, desc *Descriptor, siblings []*Descriptor) {
	for _, prev := range siblings {
		if prev.Key == desc.Key && prev.Value == desc.Value {
			d.errorf(item, "descriptor %s=%q is already defined at line %d", desc.Key, desc.Value, prev.Line)
			return
		}
	}
}

// descriptorOptions decodes the options that say how a descriptor's limit
// counts and is reported: shadow_mode, share_threshold (only on a wildcard
// value), quota_mode, metadata, detailed_metric and value_to_metric.
func (d *decoder) descriptorOptions(f map[string]field, desc *Descriptor) {
	d.flag(f, "shadow_mode", &desc.Shadow)
	if x, ok := d.flag(f, "share_threshold", &desc.ShareThreshold); ok && desc.ShareThreshold && desc.wildcard == nil {
		d.errorf(x.key, "share_threshold applies only to a wildcard value (one with '*')")
	}
	d.flag(f, "quota_mode", &desc.QuotaMode)
	if x, ok := f["metadata"]; ok {
		desc.Metadata = d.metadata(x.val)
	}
	d.flag(f, "detailed_metric", &desc.DetailedMetric)
	d.flag(f, "value_to_metric", &desc.ValueToMetric)
}

// descriptorLimit decodes what limits a descriptor: a named policy (one of
// sluice's format, defined before) or a rate_limit, not both.
func (d *decoder) descriptorLimit(c *Config, dom *Domain, f map[string]field, desc *Descriptor, here []string) {
	rl, hasRL := f["rate_limit"]
	if x, ok := f["policy"]; ok {
		desc.Policy = d.str(x.val, "policy")
		if hasRL {
			d.errorf(x.key, "descriptor: set policy or rate_limit, not both")
		} else if p := c.Policy(desc.Policy); p == nil || p.Envoy {
			d.errorf(x.val, "descriptor: unknown policy %q (define it under policies, before domains)", desc.Policy)
		} else if p.Algorithm == driver.AlgorithmInFlight {
			d.errorf(x.val, "descriptor: policy %q is in_flight: Envoy's rate-limit service has no release, so a lease could never be given back (use a rate policy)", desc.Policy)
		} else if msg := envoyUnhonoured(p); msg != "" {
			d.errorf(x.val, "descriptor: policy %q: %s", desc.Policy, msg)
		} else if msg := grantsRefused(p, dom.Counting); msg != "" {
			d.errorf(x.val, "descriptor: policy %q: %s", desc.Policy, msg)
		}
	}
	if hasRL {
		d.rateLimit(c, dom, desc, rl.val, here)
	}
}

// planEntry decodes plan_entry, which needs the descriptor's policy to have
// plans and the descriptor to have no value (the request's value names the
// plan).
func (d *decoder) planEntry(c *Config, f map[string]field, desc *Descriptor) {
	x, ok := d.flag(f, "plan_entry", &desc.PlanEntry)
	if !ok || !desc.PlanEntry {
		return
	}
	if msg := planEntryProblem(c, desc); msg != "" {
		d.errorf(x.key, "%s", msg)
	}
}

// planEntryProblem says why desc cannot be a plan entry: no policy, a
// value, or a policy without plans; "" when it can.
func planEntryProblem(c *Config, desc *Descriptor) string {
	switch p := c.Policy(desc.Policy); {
	case desc.Policy == "":
		return "plan_entry needs policy on the same descriptor (the policy whose plan the value names)"
	case desc.Value != "":
		return fmt.Sprintf("plan_entry: the request's value names the plan, so the descriptor has no value (got %q)", desc.Value)
	case p != nil && len(p.Plans) == 0:
		return fmt.Sprintf("plan_entry: policy %q has no plans", desc.Policy)
	}
	return ""
}

// rateLimit decodes a descriptor's rate_limit into its Limit and, unless it
// is unlimited or denies everything, a generated fixed-window policy named
// after path.
func (d *decoder) rateLimit(c *Config, dom *Domain, desc *Descriptor, n *yaml.Node, path []string) {
	if isNull(d.resolve(n)) {
		return // "rate_limit:" with nothing: no limit, as envoyproxy/ratelimit reads it
	}
	f := d.fields(n, "rate_limit", rateLimitSection)
	if f == nil {
		return
	}
	lim := d.limitName(f)
	if d.unlimited(f, desc, lim) {
		return
	}
	unit := d.limitRate(n, f, lim)
	if unit == 0 || lim.Multiplier == 0 {
		return
	}
	lim.Window = unit * time.Duration(lim.Multiplier)
	desc.Limit = lim
	if lim.RequestsPerUnit == 0 {
		desc.Deny = true
		return
	}
	d.envoyPolicy(c, dom, desc, n, path, lim)
}

// limitName starts the limit of a rate_limit's fields f: its name and
// the limits it replaces.
func (d *decoder) limitName(f map[string]field) *EnvoyLimit {
	lim := &EnvoyLimit{Multiplier: 1}
	lim.Name = d.optString(f, "name", "rate_limit name")
	if x, ok := f["replaces"]; ok {
		lim.Replaces = d.replaces(x.val, lim.Name)
	}
	return lim
}

// unlimited reports a rate_limit with unlimited: true, which makes desc
// Unlimited and refuses a unit beside it.
func (d *decoder) unlimited(f map[string]field, desc *Descriptor, lim *EnvoyLimit) bool {
	if x, ok := f["unlimited"]; !ok || !d.boolean(x.val, "unlimited") {
		return false
	}
	desc.Unlimited = true
	// requests_per_unit is ignored with unlimited, as upstream does; a
	// unit is refused, as upstream does.
	for _, other := range []string{"unit", "unit_multiplier"} {
		if y, ok := f[other]; ok {
			d.errorf(y.key, "rate_limit: %s makes no sense with unlimited: true", other)
		}
	}
	desc.Limit = lim
	return true
}

// limitRate decodes a rate_limit's unit (required), requests_per_unit
// (required) and unit_multiplier into lim; it returns the unit's length, 0
// when it is missing or unknown.
func (d *decoder) limitRate(n *yaml.Node, f map[string]field, lim *EnvoyLimit) time.Duration {
	var unit time.Duration
	if x, ok := f["unit"]; ok {
		s := d.str(x.val, "unit")
		unit = envoyUnits[strings.ToLower(s)]
		if unit == 0 {
			d.errorf(x.val, "rate_limit: unknown unit %q (want second, minute, hour, day, week, month or year)", s)
		}
		lim.Unit = strings.ToUpper(s)
	} else {
		d.errorf(n, "rate_limit: unit is missing")
	}
	if x, ok := f["requests_per_unit"]; ok {
		lim.RequestsPerUnit, _ = d.intField(x.val, "requests_per_unit", rateLimitSection.Field("requests_per_unit"))
	} else {
		d.errorf(n, "rate_limit: requests_per_unit is missing")
	}
	if x, ok := f["unit_multiplier"]; ok {
		lim.Multiplier, _ = d.intField(x.val, "unit_multiplier", rateLimitSection.Field("unit_multiplier"))
	}
	return unit
}

// envoyPolicy generates the fixed-window policy of the limit lim of desc,
// found under path in dom, and makes it desc's policy.
func (d *decoder) envoyPolicy(c *Config, dom *Domain, desc *Descriptor, n *yaml.Node, path []string, lim *EnvoyLimit) {
	p := &Policy{
		Algorithm:  driver.AlgorithmFixedWindow,
		Policy:     EnvoyWindow(lim.RequestsPerUnit, lim.Window, dom.Counting),
		Params:     driver.Params{Limit: lim.RequestsPerUnit, Window: lim.Window, CountRejected: dom.Counting != CountAllOrNothing},
		Limit:      lim.RequestsPerUnit,
		Shadow:     desc.Shadow,
		Headers:    HeadersAll,
		Envoy:      true,
		Domain:     dom.Name,
		Line:       n.Line,
		EnvoyLimit: lim,
		// The deny cache applies unless refused hits count.
		DenyCache: dom.Counting == CountAllOrNothing,
	}
	if c.Valkey != nil {
		p.Timeout = c.Valkey.Timeout
	}
	if _, err := p.Policy.Rule(); err != nil {
		d.errorf(n, "rate_limit: %s", sluice.Reason(err))
		return
	}
	p.Name = envoyName(c, dom.Name, path, lim.Name)
	p.Description = fmt.Sprintf("envoy domain %s: %s", dom.Name, strings.Join(path, " / "))
	p.Limiter = EnvoyLimiter(lim.Window)
	desc.Policy = p.Name
	c.Policies = append(c.Policies, p)
}

// EnvoyWindow is the policy of an envoyproxy/ratelimit limit: a fixed
// window aligned on the Unix epoch that, under CountEach, counts refused
// hits too.
func EnvoyWindow(limit int64, window time.Duration, counting Counting) sluice.FixedWindow {
	return sluice.FixedWindow{Limit: limit, Window: window, CountRejected: counting != CountAllOrNothing}
}

// EnvoyLimiter names the counters of envoyproxy/ratelimit limits of one
// window: as there, a descriptor's count lives under its domain, entries and
// window, so a per-request override of the same unit shares it.
func EnvoyLimiter(window time.Duration) string {
	return fmt.Sprintf("envoy.%ds", window/time.Second)
}

func (d *decoder) replaces(n *yaml.Node, own string) []string {
	var out []string
	for _, item := range d.sequence(n, "replaces") {
		f := d.fields(item, "replaces item", replacesSection)
		if f == nil {
			continue
		}
		name := d.optString(f, "name", "replaces name")
		switch {
		case name == "":
			d.errorf(item, "rate_limit: a replaces entry needs a name")
		case name == own:
			d.errorf(item, "rate_limit: replaces names the limit itself (%q)", name)
		default:
			out = append(out, name)
		}
	}
	return out
}

// metadata decodes a descriptor's metadata: any mapping, kept for the
// answer's dynamic metadata.
func (d *decoder) metadata(n *yaml.Node) map[string]any {
	r := d.resolve(n)
	if r == nil {
		return nil
	}
	if r.Kind != yaml.MappingNode {
		d.errorf(r, "metadata must be a mapping, got %s", describe(r))
		return nil
	}
	var m map[string]any
	if err := r.Decode(&m); err != nil {
		d.errorf(r, "metadata: %v", err)
		return nil
	}
	if err := plainValue(m, 0); err != nil {
		d.errorf(r, "metadata: %v", err)
		return nil
	}
	return m
}

// plainValue checks that v holds only what a protobuf Struct can: strings,
// numbers, booleans, nulls, lists and mappings with string keys.
func plainValue(v any, depth int) error {
	if depth > 32 {
		return fmt.Errorf("nested too deeply")
	}
	switch x := v.(type) {
	case nil, string, bool, int, int64, uint64, float64:
		return nil
	case []any:
		return plainValues(x, depth+1)
	case map[string]any:
		return plainValues(slices.Collect(maps.Values(x)), depth+1)
	}
	return fmt.Errorf("%v (%T) is not a string, number, boolean, list or mapping", v, v)
}

// plainValues checks each of values with plainValue, at depth.
func plainValues(values []any, depth int) error {
	for _, e := range values {
		if err := plainValue(e, depth); err != nil {
			return err
		}
	}
	return nil
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
	name := cleanName(b.String())
	if label != "" && freeName(c, label) {
		name = label
	}
	if freeName(c, name) {
		return name
	}
	sum := sha256.Sum256([]byte(domain + "\x00" + strings.Join(path, "\x00")))
	return "envoy-" + hex.EncodeToString(sum[:10])
}

// cleanName replaces each character a policy name cannot hold with '_'.
func cleanName(s string) string {
	return strings.Map(func(r rune) rune {
		if nameChar(r) {
			return r
		}
		return '_'
	}, s)
}

// freeName reports whether name is a valid policy name no policy of c has.
func freeName(c *Config, name string) bool {
	return checkName(name) == nil && c.Policy(name) == nil
}
