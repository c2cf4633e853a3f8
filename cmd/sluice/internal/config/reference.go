package config

import (
	"bytes"
	_ "embed"
	"fmt"
	"strings"
	"text/template"
	"time"
	"unicode"

	"github.com/sluicehq/sluice/driver"
)

// The configuration reference, docs/configuration.md, made from the field
// table and reference.md.tmpl (go generate ./internal/config writes it).

//go:generate go run ./cmd/gendocs -docs ../../../../docs

//go:embed reference.md.tmpl
var referenceTemplate string

// Reference returns docs/configuration.md.
func Reference() []byte {
	t := template.Must(template.New("reference").Parse(referenceTemplate))
	var secs strings.Builder
	for i, s := range Sections {
		if i > 0 {
			secs.WriteString("\n")
		}
		writeSection(&secs, s)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, map[string]string{"Sections": strings.TrimRight(secs.String(), "\n")}); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// writeSection writes the reference of section s: a table of its fields,
// then the checks on several of them and those only the decoder makes.
func writeSection(b *strings.Builder, s *Section) {
	fmt.Fprintf(b, "### `%s`\n\n", s.Path)
	algs := s == policySection || s == plansSection
	if algs {
		b.WriteString("| field | type | default | bounds | algorithms | description |\n| --- | --- | --- | --- | --- | --- |\n")
	} else {
		b.WriteString("| field | type | default | bounds | description |\n| --- | --- | --- | --- | --- |\n")
	}
	for _, f := range s.Fields {
		b.WriteString(fieldRow(f, algs))
	}
	if both := jointChecks(s); len(both) > 0 {
		b.WriteString("\nChecked together, at load and by the schema: " + strings.Join(both, "; ") + ".\n")
	}
	if len(s.Rules) > 0 {
		b.WriteString("\nChecked at load only (the schema cannot express it): " + strings.Join(s.Rules, "; ") + ".\n")
	}
}

// fieldRow is the table row of field f; algs: with the algorithms that
// take it.
func fieldRow(f *Field, algs bool) string {
	name := "`" + f.Name + "`"
	if f.Required {
		name += " (required)"
	}
	cells := []string{name, typeOf(f), cell(f.Default), bounds(f)}
	if algs {
		cells = append(cells, algorithmsCell(f))
	}
	cells = append(cells, escape(f.Desc))
	return "| " + strings.Join(cells, " | ") + " |\n"
}

// algorithmsCell lists the algorithms that take f, marking those that need
// it; "all" when every algorithm takes it.
func algorithmsCell(f *Field) string {
	if f.Algorithms == nil {
		return "all"
	}
	var names []string
	for _, x := range f.Algorithms {
		n := x.String()
		if hasAlgorithm(f.RequiredBy, x) {
			n += " (required)"
		}
		names = append(names, n)
	}
	return strings.Join(names, ", ")
}

// jointChecks describes the checks of section s on several fields
// together: its Exclusive, Together and ExactlyOne, and the per-algorithm
// rules of policies and rate limits.
func jointChecks(s *Section) []string {
	var both []string
	for _, p := range s.Exclusive {
		both = append(both, fmt.Sprintf("`%s` or `%s`, not both", p[0], p[1]))
	}
	for _, p := range s.Together {
		both = append(both, fmt.Sprintf("`%s` and `%s` go together", p[0], p[1]))
	}
	if len(s.ExactlyOne) > 0 {
		both = append(both, "exactly one of `"+strings.Join(s.ExactlyOne, "` and `")+"`")
	}
	if s == policySection {
		both = append(both, "a field the algorithm does not take is refused, and the algorithm's required fields must be set",
			fmt.Sprintf("sliding_log: `limit` at most %d (driver.MaxSlidingLogLimit), in plans too", driver.MaxSlidingLogLimit),
			"fixed_window: `window` or `period`, one of them; `zone` goes with `period`; `renewal_day` with `period: month`",
			"plans: `limit` for fixed_window, sliding_log and sliding_window; `burst` (and optionally `rate`) for token_bucket and gcra")
	}
	if s == rateLimitSection {
		both = append(both, "`unlimited: true` takes no `unit` or `unit_multiplier`; otherwise `unit` and `requests_per_unit` are required")
	}
	return both
}

// kindTypes names the type of each kind whose type names no other.
var kindTypes = map[Kind]string{
	KindString: "string", KindBool: "boolean", KindInt: "integer", KindDuration: "duration", KindRate: "rate", KindAny: "mapping",
}

// typeOf is the type of field f as the reference shows it.
func typeOf(f *Field) string {
	if t, ok := kindTypes[f.Kind]; ok {
		return t
	}
	switch f.Kind {
	case KindEnum:
		if len(f.Enum) > 6 {
			return "one of " + strings.Join(quoted(f.Enum[:len(f.Enum):len(f.Enum)], 3), ", ")
		}
		return "one of " + strings.Join(quoted(f.Enum, 1), ", ")
	case KindList:
		return "list of " + typeOf(f.Item)
	case KindSection:
		return sectionLink(f.Section)
	case KindMap:
		return "mapping of names to " + sectionLink(f.Section)
	}
	return f.Type
}

// duration shows d as the file would write it: 50ms, 1m, 400d.
func duration(d time.Duration) string {
	if d >= 24*time.Hour && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// quoted returns every step-th value in backquotes (the envoy units come
// in three spellings each: the reference shows the first).
func quoted(vals []string, step int) []string {
	var out []string
	for i := 0; i < len(vals); i += step {
		out = append(out, "`"+vals[i]+"`")
	}
	return out
}

func sectionLink(s *Section) string {
	return "[`" + s.Path + "`](#" + slug("`"+s.Path+"`") + ")"
}

// slug is the anchor GitHub gives a heading.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

func bounds(f *Field) string {
	switch f.Kind {
	case KindInt:
		return fmt.Sprintf("%d to %d", f.Min, f.Max)
	case KindDuration:
		return duration(f.MinDur) + " to " + duration(f.MaxDur)
	case KindList:
		if f.Min > 0 {
			return fmt.Sprintf("at least %d", f.Min)
		}
	case KindString:
		if f.Max > 0 {
			return fmt.Sprintf("1 to %d characters", f.Max)
		}
	}
	return ""
}

func cell(s string) string {
	if s == "" {
		return ""
	}
	return escape(s)
}

func escape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
