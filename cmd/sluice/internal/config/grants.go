package config

import (
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
	"go.yaml.in/yaml/v3"
)

// Decoding of a policy's grants (sluice.WithGrants): grants: auto and its
// tuning fields, and the refusal at load of everything the library refuses
// with grants, so that a configuration the decoder takes never fails at
// sluice serve's start or at a first request.

// grantFields are the tuning fields of grants, which need grants: auto.
var grantFields = []string{"grant_life", "grant_period", "grant_max_keys"}

// grantDecoders decode grants and its tuning fields into p.
var grantDecoders = []fieldDecoder[*Policy]{
	{"grants", func(d *decoder, p *Policy, n *yaml.Node) {
		switch s := d.str(n, "grants"); s {
		case "auto":
			p.Grants = true
		case "off":
		default:
			d.errorf(n, "grants must be auto or off, got %q", s)
		}
	}},
	{"grant_life", func(d *decoder, p *Policy, n *yaml.Node) {
		p.GrantOptions.Life = d.durationField(n, "grant_life", policySection.Field("grant_life"))
	}},
	{"grant_period", func(d *decoder, p *Policy, n *yaml.Node) {
		p.GrantOptions.Period = d.durationField(n, "grant_period", policySection.Field("grant_period"))
	}},
	{"grant_max_keys", func(d *decoder, p *Policy, n *yaml.Node) {
		v, _ := d.intField(n, "grant_max_keys", policySection.Field("grant_max_keys"))
		p.GrantOptions.MaxKeys = int(v)
	}},
}

// grants decodes grants and its tuning fields into p, before the deny
// cache's default is chosen (grants refuse locally already).
func (d *decoder) grants(f map[string]field, p *Policy) {
	decodeFields(d, f, p, grantDecoders)
	if !p.Grants {
		for _, name := range grantFields {
			if x, ok := f[name]; ok {
				d.errorf(x.key, "policy %q: %s tunes grants: set grants: auto", p.Name, name)
			}
		}
		if x, ok := f["on_failure"]; ok && p.FailMode == sluice.FailShare {
			d.errorf(x.val, "policy %q: on_failure: share decides on the process's share of its grants: set grants: auto", p.Name)
		}
		return
	}
	d.grantConflicts(f, p)
}

// grantConflicts refuses, naming the field and the reason, the fields a
// policy with grants cannot honour (the library's refusals of WithGrants).
func (d *decoder) grantConflicts(f map[string]field, p *Policy) {
	x := f["grants"]
	if err := grantable(p); err != nil {
		d.errorf(x.key, "policy %q: grants: %s", p.Name, sluice.Reason(err))
		return
	}
	for _, c := range []struct{ field, why string }{
		{"plans", "a grant is a share of one limit, and a plan changes the limit per decision under the grants outstanding"},
		{"max_debt", "reservations (POST /v1/reservations) settle on the plain state, which a policy with grants does not decide on: a policy with grants takes no reservations"},
		{"warn_at", "a process knows only its own grant, not how close the key is to its first refusal"},
		{"penalty", "a penalty counts a key's refusals on Valkey, in the decision's script call, and a grant's refusals are local"},
	} {
		if y, ok := f[c.field]; ok {
			d.errorf(y.key, "policy %q: %s cannot apply with grants: %s", p.Name, c.field, c.why)
		}
	}
	if y, ok := f["overrides"]; ok && p.Overrides {
		d.errorf(y.key, "policy %q: overrides cannot apply with grants: an override set by another process changes the limit under the grants outstanding", p.Name)
	}
	if _, err := resolveGrantOptions(p.GrantOptions); err != nil {
		d.errorf(x.key, "policy %q: grants: %s", p.Name, sluice.Reason(err))
	}
}

// resolveGrantOptions checks o as sluice.New does, with a limiter of the
// options on the in-process store, closed at once: the library's own
// checks, so that the configuration cannot accept what it refuses.
func resolveGrantOptions(o sluice.GrantOptions) (sluice.GrantOptions, error) {
	lim, err := sluice.New(memstore.New(), sluice.GCRA{Burst: 1, Rate: 1, Per: time.Second},
		sluice.WithName("grantcheck"), sluice.WithGrants(o))
	if err != nil {
		return o, err
	}
	return o, lim.Close()
}

// grantsRefused says why an Envoy domain of counting c cannot use policy
// p, "" when it can.
func grantsRefused(p *Policy, c Counting) string {
	if p.Grants && c == CountAllOrNothing {
		return "a policy with grants decides on its own (sluice AllowN), and counting all_or_nothing would have it give back what a request refused by another descriptor took: set counting: each on the domain"
	}
	return ""
}

// grantable is the library's reason why p's algorithm cannot take grants,
// or nil.
func grantable(p *Policy) error {
	r, err := p.Policy.Rule()
	if err != nil {
		return err
	}
	return driver.Grantable(r)
}
