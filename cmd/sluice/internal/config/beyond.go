package config

import "go.yaml.in/yaml/v3"

// Decoding of what a policy does around its decisions: the warning before
// the limit (warn_at, warning_header).

// beyondDecoders decode the policy fields of this file, after
// policyOptionDecoders.
var beyondDecoders = []fieldDecoder[*Policy]{
	{"warn_at", func(d *decoder, p *Policy, n *yaml.Node) {
		v, _ := d.intField(n, "warn_at", policySection.Field("warn_at"))
		p.WarnAt = int(v)
	}},
	{"warning_header", func(d *decoder, p *Policy, n *yaml.Node) { p.WarningHeader = d.boolean(n, "warning_header") }},
}

// beyondOptions decodes the fields of beyondDecoders into p and refuses
// those that need another: warning_header without warn_at.
func (d *decoder) beyondOptions(f map[string]field, p *Policy) {
	decodeFields(d, f, p, beyondDecoders)
	if x, ok := f["warning_header"]; ok && p.WarningHeader && p.WarnAt == 0 {
		d.errorf(x.key, "policy %q: warning_header needs warn_at (the percent of the limit used from which a decision warns)", p.Name)
	}
}
