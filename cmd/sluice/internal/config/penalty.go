package config

import (
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"go.yaml.in/yaml/v3"
)

// Decoding of a policy's penalty for repeat offenders (penalty: {after,
// within, block, max_block, forgive}): sluice.WithPenalty.

// penaltySection is the penalty's fields.
var penaltySection = &Section{Path: "policies[].penalty", Def: "penalty", Fields: []*Field{
	{Name: "after", Kind: KindInt, Required: true, Min: 1, Max: driver.MaxPenaltyAfter,
		Desc: "refusals of a key, counted within `within`, that start a block"},
	{Name: "within", Kind: KindDuration, Required: true, MinDur: driver.MinWindow, MaxDur: driver.MaxWindow,
		Desc: "how long a window of counted refusals lasts, from the first one counted"},
	{Name: "block", Kind: KindDuration, Required: true, MinDur: driver.MinWindow, MaxDur: driver.MaxWindow,
		Desc: "how long the first block lasts: every request of the key is refused, nothing counted"},
	{Name: "max_block", Kind: KindDuration, Default: "block", MinDur: driver.MinWindow, MaxDur: driver.MaxWindow,
		Desc: "each further block while remembered doubles the last, up to this (default: no growth)"},
	{Name: "forgive", Kind: KindDuration, MinDur: driver.MinWindow, MaxDur: driver.MaxWindow,
		Desc: "the escalation is forgotten this long after the last block ended (required with max_block above block, refused without)"},
}, Rules: []string{
	"max_block is at least block",
	"forgive is required when max_block exceeds block, and refused otherwise",
}}

// penaltyDecoder decodes a policy's penalty.
var penaltyDecoder = fieldDecoder[*Policy]{"penalty", (*decoder).penalty}

// penalty decodes n, the penalty of p, into p.Penalty, refusing what
// sluice.WithPenalty would, with the YAML field's name.
func (d *decoder) penalty(p *Policy, n *yaml.Node) {
	f := d.fields(n, "penalty", penaltySection)
	if f == nil {
		return
	}
	var pen sluice.Penalty
	errs := len(d.errs)
	for _, name := range []string{"after", "within", "block"} {
		if _, ok := f[name]; !ok {
			d.errorf(n, "policy %q: penalty.%s is required", p.Name, name)
			return
		}
	}
	pen.After, _ = d.intField(f["after"].val, "penalty.after", penaltySection.Field("after"))
	durs := map[string]*time.Duration{"within": &pen.Within, "block": &pen.Block, "max_block": &pen.MaxBlock, "forgive": &pen.Forgive}
	for name, dst := range durs {
		if x, ok := f[name]; ok {
			*dst = d.durationField(x.val, "penalty."+name, penaltySection.Field(name))
		}
	}
	if len(d.errs) > errs {
		return
	}
	if msg := penaltyConflict(pen); msg != "" {
		d.errorf(n, "policy %q: %s", p.Name, msg)
		return
	}
	if err := pen.Validate(); err != nil {
		d.errorf(n, "policy %q: penalty: %v", p.Name, sluice.Reason(err))
		return
	}
	p.Penalty = &pen
}

// penaltyConflict says, with the YAML names, what of pen's fields
// contradict each other, "" for nothing.
func penaltyConflict(pen sluice.Penalty) string {
	switch grows := pen.MaxBlock > pen.Block; {
	case pen.MaxBlock != 0 && pen.MaxBlock < pen.Block:
		return "penalty.max_block (" + pen.MaxBlock.String() + ") must be at least penalty.block (" + pen.Block.String() + ")"
	case grows && pen.Forgive == 0:
		return "penalty.forgive is required when penalty.max_block exceeds penalty.block: the time after which the escalation is forgotten"
	case !grows && pen.Forgive != 0:
		return "penalty.forgive has no effect unless penalty.max_block exceeds penalty.block (every block lasts block): remove it"
	}
	return ""
}
