package config

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/sluicehq/sluice/driver"
)

// The JSON Schema of the configuration, made from the field table: what
// docs/sluice.schema.json holds (go generate ./internal/config writes it).

// durationPattern matches what ParseDuration reads: a Go duration or whole
// days. Its bounds are the decoder's alone.
const durationPattern = `^\s*([0-9]+d|([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))*)\s*$`

// ratePattern matches what ParseRate reads.
const ratePattern = `^\s*([0-9]+(\.[0-9]*)?|\.[0-9]+)\s*/\s*(s|sec|second|m|min|minute|h|hour|d|day)\s*$`

func ref(def string) map[string]any { return map[string]any{"$ref": "#/definitions/" + def} }

func boolSchema() map[string]any {
	return map[string]any{"anyOf": []any{map[string]any{"type": "boolean"}, map[string]any{"enum": boolSpellings}}}
}

// truthy matches the spellings of true, for if/then rules.
func truthy() map[string]any {
	vals := []any{true}
	for _, s := range boolSpellings[:11] {
		vals = append(vals, s)
	}
	return map[string]any{"enum": vals}
}

// kindSchemas makes the schema of a field of each kind but KindList (whose
// schema holds its item's, so fieldSchema makes it: a table that fieldSchema
// reads cannot refer back to it).
var kindSchemas = map[Kind]func(f *Field) map[string]any{
	KindString: stringSchema,
	KindBool:   func(*Field) map[string]any { return boolSchema() },
	KindInt: func(f *Field) map[string]any {
		return map[string]any{"type": "integer", "minimum": f.Min, "maximum": f.Max}
	},
	KindDuration: func(*Field) map[string]any { return map[string]any{"type": "string", "pattern": durationPattern} },
	KindRate:     func(*Field) map[string]any { return map[string]any{"type": "string", "pattern": ratePattern} },
	KindEnum:     func(f *Field) map[string]any { return map[string]any{"enum": f.Enum} },
	KindSection:  func(f *Field) map[string]any { return ref(f.Section.Def) },
	KindMap: func(f *Field) map[string]any {
		return map[string]any{"type": "object", "propertyNames": map[string]any{"pattern": policyNamePattern},
			"additionalProperties": ref(f.Section.Def)}
	},
	KindAny: func(*Field) map[string]any { return map[string]any{"type": "object"} },
	KindCustom: func(f *Field) map[string]any {
		s := map[string]any{}
		for k, v := range f.Schema {
			s[k] = v
		}
		return s
	},
}

// fieldSchema is the JSON Schema of the field f's value, with its
// description.
func fieldSchema(f *Field) map[string]any {
	var s map[string]any
	if f.Kind == KindList {
		s = listSchema(f)
	} else if build, ok := kindSchemas[f.Kind]; ok {
		s = build(f)
	} else {
		panic(fmt.Sprintf("config: field %s has no kind", f.Name))
	}
	if f.Desc != "" {
		s["description"] = describeField(f)
	}
	return s
}

// stringSchema is a KindString's schema: its pattern, or else a string or
// null unless the field is required.
func stringSchema(f *Field) map[string]any {
	s := map[string]any{"type": "string"}
	if f.Pattern != "" {
		s["pattern"] = f.Pattern
	} else if !f.Required {
		// "key:" with nothing is "", as envoyproxy/ratelimit reads it
		s["type"] = []string{"string", "null"}
	}
	return s
}

// listSchema is a KindList's schema: an array of its item's, with its
// minimum length, or else an array or null unless the field is required.
func listSchema(f *Field) map[string]any {
	s := map[string]any{"type": "array", "items": fieldSchema(f.Item)}
	if f.Min > 0 {
		s["minItems"] = f.Min
	} else if !f.Required {
		// "key:" with nothing is an empty list, as YAML 1.1 readers take it
		s["type"] = []string{"array", "null"}
	}
	return s
}

// describeField is the field's description with its default and bounds,
// as editors show it.
func describeField(f *Field) string {
	d := f.Desc
	if f.Default != "" {
		d += " (default " + f.Default + ")"
	}
	if f.Kind == KindDuration {
		d += " (" + duration(f.MinDur) + " to " + duration(f.MaxDur) + ")"
	}
	return d
}

// sectionSchema is the JSON Schema of one section: its fields, the
// required ones, and the rules joining several.
func sectionSchema(sec *Section) map[string]any {
	props := map[string]any{}
	var required []string
	for _, f := range sec.Fields {
		props[f.Name] = fieldSchema(f)
		if f.Required {
			required = append(required, f.Name)
		}
	}
	s := map[string]any{"type": "object", "additionalProperties": false, "properties": props}
	if len(required) > 0 {
		s["required"] = required
	}
	if all := jointSchema(sec); len(all) > 0 {
		s["allOf"] = all
	}
	return s
}

// jointSchema are the section's rules on several fields at once: the
// pairs that exclude each other, the fields of which exactly one is set,
// the pairs set together, and the section's own.
func jointSchema(sec *Section) []any {
	var all []any
	for _, pair := range sec.Exclusive {
		all = append(all, map[string]any{"not": map[string]any{"required": pair}})
	}
	if len(sec.ExactlyOne) > 0 {
		all = append(all, exactlyOneSchema(sec.ExactlyOne))
	}
	if len(sec.Together) > 0 {
		all = append(all, togetherSchema(sec.Together))
	}
	if sec.schema != nil {
		all = append(all, sec.schema()...)
	}
	return all
}

// exactlyOneSchema requires exactly one of names.
func exactlyOneSchema(names []string) map[string]any {
	var one []any
	for _, name := range names {
		one = append(one, map[string]any{"required": []string{name}})
	}
	return map[string]any{"oneOf": one}
}

// togetherSchema requires each field of a pair when the other is set.
func togetherSchema(pairs [][]string) map[string]any {
	dep := map[string]any{}
	for _, pair := range pairs {
		dep[pair[0]] = []string{pair[1]}
		dep[pair[1]] = []string{pair[0]}
	}
	return map[string]any{"dependencies": dep}
}

// policyRules are the per-algorithm rules of policies: the fields each
// algorithm takes and needs, its plans' fields, and the fixed window's
// window or period.
func policyRules() []any {
	var out []any
	for _, a := range algorithms {
		out = append(out, map[string]any{
			"if":   map[string]any{"properties": map[string]any{"algorithm": map[string]any{"const": a.String()}}, "required": []string{"algorithm"}},
			"then": algorithmSchema(a),
		})
	}
	out = append(out, grantRules()...)
	out = append(out, map[string]any{
		"if":   map[string]any{"required": []string{"renewal_day"}},
		"then": map[string]any{"properties": map[string]any{"period": map[string]any{"const": "month"}}},
	})
	return out
}

// algorithmSchema is what a policy of algorithm a must satisfy: the
// fields it takes and needs, and its plans'.
func algorithmSchema(a driver.Algorithm) map[string]any {
	props, req := algorithmFields(policySection.Fields, a)
	planProps, planReq := algorithmFields(plansSection.Fields, a)
	if a == driver.AlgorithmInFlight {
		// one sorted-set entry per lease
		props["limit"] = map[string]any{"maximum": driver.MaxInFlightLimit}
	}
	if a == driver.AlgorithmSlidingLog {
		// one sorted-set entry per unit
		props["limit"] = map[string]any{"maximum": driver.MaxSlidingLogLimit}
		planProps["limit"] = map[string]any{"maximum": driver.MaxSlidingLogLimit}
	}
	if policySection.Field("plans").takes(a) {
		props["plans"] = map[string]any{"additionalProperties": map[string]any{"properties": planProps, "required": planReq}}
	}
	then := map[string]any{"properties": props}
	if len(req) > 0 {
		then["required"] = req
	}
	if a == driver.AlgorithmFixedWindow {
		then["oneOf"] = []any{map[string]any{"required": []string{"window"}}, map[string]any{"required": []string{"period"}}}
		then["dependencies"] = map[string]any{"period": []string{"zone"}, "zone": []string{"period"}, "renewal_day": []string{"period"}}
	}
	return then
}

// algorithmFields are, of fields, those algorithm a does not take (each
// false in props) and those it requires.
func algorithmFields(fields []*Field, a driver.Algorithm) (props map[string]any, req []string) {
	props = map[string]any{}
	for _, f := range fields {
		if !f.takes(a) {
			props[f.Name] = false
		}
		if f.requiredBy(a) {
			req = append(req, f.Name)
		}
	}
	return props, req
}

// rateLimitRules: unlimited takes no unit; otherwise unit and
// requests_per_unit are required.
func rateLimitRules() []any {
	return []any{map[string]any{
		"if":   map[string]any{"properties": map[string]any{"unlimited": truthy()}, "required": []string{"unlimited"}},
		"then": map[string]any{"properties": map[string]any{"unit": false, "unit_multiplier": false}},
		"else": map[string]any{"required": []string{"unit", "requests_per_unit"}},
	}}
}

// Schema returns the JSON Schema (draft-07, which editors read widely) of configuration files,
// both formats: a file with a top-level domain is envoyproxy/ratelimit's.
func Schema() []byte {
	defs := map[string]any{}
	for _, sec := range Sections {
		defs[sec.Def] = sectionSchema(sec)
	}
	s := map[string]any{
		"$schema":     "http://json-schema.org/draft-07/schema#",
		"title":       "sluice serve configuration",
		"description": "Generated from the field table of cmd/sluice/internal/config (docs/configuration.md). A file with a top-level domain is envoyproxy/ratelimit's format.",
		"if":          map[string]any{"type": "object", "required": []string{"domain"}},
		"then":        ref(domainSection.Def),
		"else":        ref(topSection.Def),
		"definitions": defs,
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// grantRules are the rules of grants the schema can express: what grants:
// auto refuses, and what needs it.
func grantRules() []any {
	auto := map[string]any{"properties": map[string]any{"grants": map[string]any{"const": "auto"}}, "required": []string{"grants"}}
	var out []any
	for _, f := range []string{"plans", "max_debt", "warn_at", "penalty"} {
		out = append(out, map[string]any{"if": auto, "then": map[string]any{"not": map[string]any{"required": []string{f}}}})
	}
	for _, f := range []string{"overrides", "deny_cache"} {
		out = append(out, map[string]any{"if": auto, "then": map[string]any{"properties": map[string]any{f: map[string]any{"not": truthy()}}}})
	}
	for _, f := range grantFields {
		out = append(out, map[string]any{"if": map[string]any{"required": []string{f}}, "then": auto})
	}
	share := map[string]any{"properties": map[string]any{"on_failure": map[string]any{"const": "share"}}, "required": []string{"on_failure"}}
	return append(out, map[string]any{"if": share, "then": auto})
}
