package config

import (
	"encoding/json"

	"go.yaml.in/yaml/v3"
)

// Decoding of what a policy does around its decisions: the warning before
// the limit (warn_at, warning_header) and the response to its refusals
// (deny_status, deny_body).

// beyondDecoders decode the policy fields of this file, after
// policyOptionDecoders.
var beyondDecoders = []fieldDecoder[*Policy]{
	{"warn_at", func(d *decoder, p *Policy, n *yaml.Node) {
		v, _ := d.intField(n, "warn_at", policySection.Field("warn_at"))
		p.WarnAt = int(v)
	}},
	{"warning_header", func(d *decoder, p *Policy, n *yaml.Node) { p.WarningHeader = d.boolean(n, "warning_header") }},
	{"deny_status", func(d *decoder, p *Policy, n *yaml.Node) {
		v, _ := d.intField(n, "deny_status", policySection.Field("deny_status"))
		p.DenyStatus = int(v)
	}},
	{"deny_body", (*decoder).denyBody},
	penaltyDecoder,
}

// denyBody decodes deny_body into p: any mapping, sent as a JSON document.
func (d *decoder) denyBody(p *Policy, n *yaml.Node) {
	r := d.resolve(n)
	if r == nil {
		return
	}
	if r.Kind != yaml.MappingNode {
		d.errorf(r, "deny_body must be a mapping (a JSON object), got %s", describe(r))
		return
	}
	var m map[string]any
	if err := r.Decode(&m); err != nil {
		d.errorf(r, "deny_body: %v", err)
		return
	}
	if err := plainValue(m, 0); err != nil {
		d.errorf(r, "deny_body: %v", err)
		return
	}
	b, err := json.Marshal(m)
	if err != nil {
		d.errorf(r, "deny_body: %v", err)
		return
	}
	p.DenyBody = b
}

// beyondOptions decodes the fields of beyondDecoders into p and refuses
// those that need another or cannot apply: warning_header without warn_at,
// deny_status and deny_body on a shadow policy.
func (d *decoder) beyondOptions(f map[string]field, p *Policy) {
	decodeFields(d, f, p, beyondDecoders)
	if x, ok := f["warning_header"]; ok && p.WarningHeader && p.WarnAt == 0 {
		d.errorf(x.key, "policy %q: warning_header needs warn_at (the percent of the limit used from which a decision warns)", p.Name)
	}
	if !p.Shadow {
		return
	}
	for _, name := range []string{"deny_status", "deny_body"} {
		if x, ok := f[name]; ok {
			d.errorf(x.key, "policy %q: %s cannot apply with shadow: true (a shadow policy never refuses)", p.Name, name)
		}
	}
}

// envoyUnhonoured says which field of p Envoy's rate-limit service cannot
// honour, "" for none: its answers are OK or OVER_LIMIT, and Envoy's
// rate-limit filter chooses the status and body of a refusal
// (rate_limited_status) and sends no warning header.
func envoyUnhonoured(p *Policy) string {
	switch {
	case p.DenyStatus != 0 || p.DenyBody != nil:
		return "deny_status and deny_body do not apply to Envoy's answers (Envoy's rate-limit filter chooses the refusal's status: rate_limited_status); use another policy for Envoy"
	case p.Wait > 0:
		return "wait does not apply to Envoy's answers (Envoy's rate-limit filter waits only its own short timeout, then its failure mode decides); use another policy for Envoy"
	case p.WarningHeader:
		return "warning_header does not apply to Envoy's answers; use another policy for Envoy (warn_at alone still counts sluice_warnings_total)"
	}
	return ""
}
