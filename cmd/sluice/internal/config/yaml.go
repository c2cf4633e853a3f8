package config

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// An Error is one problem found in a configuration file, with its position.
type Error struct {
	File   string
	Line   int
	Column int
	Msg    string
}

// Error returns "file:line:column: message".
func (e *Error) Error() string {
	if e.Line <= 0 {
		return e.File + ": " + e.Msg
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Msg)
}

// maxErrors bounds the problems reported for one file: past it, the rest are
// usually consequences of the first ones.
const maxErrors = 20

// maxNodes bounds the YAML nodes visited, aliases expanded, so that a small
// file of nested aliases ("billion laughs") cannot exhaust the process.
const maxNodes = 200_000

// decoder walks a yaml.Node tree strictly, collecting positioned errors.
type decoder struct {
	file  string
	errs  []error
	nodes int
}

func (d *decoder) errorf(n *yaml.Node, format string, args ...any) {
	if len(d.errs) > maxErrors {
		return
	}
	e := &Error{File: d.file, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	if len(d.errs) == maxErrors {
		e.Msg = "too many errors; stopping"
	}
	d.errs = append(d.errs, e)
}

func (d *decoder) err() error {
	if len(d.errs) == 0 {
		return nil
	}
	return errors.Join(d.errs...)
}

// parseDocument reads exactly one YAML document.
func (d *decoder) parseDocument(data []byte) *yaml.Node {
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.errorf(nil, "the file is empty")
			return nil
		}
		d.yamlError(err)
		return nil
	}
	if !d.noSecondDocument(dec) {
		return nil
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		d.errorf(&doc, "the file holds no YAML document")
		return nil
	}
	return doc.Content[0]
}

// noSecondDocument reports whether dec holds nothing more, reporting a
// second document or a syntax error.
func (d *decoder) noSecondDocument(dec *yaml.Decoder) bool {
	var extra yaml.Node
	err := dec.Decode(&extra)
	switch {
	case err == nil:
		d.errorf(&extra, "a second YAML document (---) is not allowed: put everything in one document")
		return false
	case !errors.Is(err, io.EOF):
		d.yamlError(err)
		return false
	}
	return true
}

// yamlError turns a syntax error of the YAML parser ("yaml: line 3: ...")
// into a positioned Error.
func (d *decoder) yamlError(err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.IndexByte(rest, ':'); i > 0 {
			if n, err := strconv.Atoi(rest[:i]); err == nil {
				line = n
				msg = strings.TrimSpace(rest[i+1:])
			}
		}
	}
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Column: 1, Msg: "invalid YAML: " + msg})
}

// resolve follows aliases and counts the nodes visited.
func (d *decoder) resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	d.nodes++
	if d.nodes == maxNodes {
		d.errorf(n, "the document is too large or has too many aliases (more than %d nodes)", maxNodes)
	}
	if d.nodes >= maxNodes {
		return nil
	}
	return n
}

type field struct {
	key, val *yaml.Node
}

// mapping returns the fields of mapping node n, reporting unknown and
// duplicate keys. allowed lists the known keys.
func (d *decoder) mapping(n *yaml.Node, what string, allowed ...string) map[string]field {
	n = d.resolve(n)
	if n == nil {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, "%s must be a mapping (key: value lines), got %s", what, describe(n))
		return nil
	}
	out := make(map[string]field, len(n.Content)/2)
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := d.resolve(n.Content[i]), n.Content[i+1]
		if k == nil {
			return out
		}
		if isMergeKey(k) {
			merges = append(merges, v)
			continue
		}
		d.addField(out, k, v, what, allowed)
	}
	d.merge(out, merges, what, allowed, 0)
	return out
}

// isMergeKey reports whether k is a YAML merge key (<<).
func isMergeKey(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge"
}

// addField adds the field k: v to out, reporting a key that is no plain
// name, is set twice or is not one of allowed.
func (d *decoder) addField(out map[string]field, k, v *yaml.Node, what string, allowed []string) {
	if k.Kind != yaml.ScalarNode {
		d.errorf(k, "%s: keys must be plain names", what)
		return
	}
	name := k.Value
	if _, dup := out[name]; dup {
		d.errorf(k, "%s: %q is set twice", what, name)
		return
	}
	if !slices.Contains(allowed, name) {
		d.errorf(k, "%s: unknown field %q%s", what, name, suggest(name, allowed))
		return
	}
	out[name] = field{key: k, val: v}
}

// merge adds the fields of YAML merge keys ("<<: *base", "<<: [*a, *b]")
// that the mapping does not set itself; the first mapping listed wins, as
// in YAML 1.1.
func (d *decoder) merge(out map[string]field, merges []*yaml.Node, what string, allowed []string, depth int) {
	if depth > 10 {
		return
	}
	for _, m := range merges {
		m = d.resolve(m)
		if m == nil {
			return
		}
		if !d.mergeFrom(out, mergeSources(m), what, allowed) {
			return
		}
	}
}

// mergeSources are the mappings a merge key's value m names: m itself, or
// the items of a list.
func mergeSources(m *yaml.Node) []*yaml.Node {
	if m.Kind == yaml.SequenceNode {
		return m.Content
	}
	return []*yaml.Node{m}
}

// mergeFrom adds to out the fields of srcs it does not set, the first
// source first; false when the document's node budget ran out.
func (d *decoder) mergeFrom(out map[string]field, srcs []*yaml.Node, what string, allowed []string) bool {
	for _, src := range srcs {
		src = d.resolve(src)
		if src == nil {
			return false
		}
		if src.Kind != yaml.MappingNode {
			d.errorf(src, "%s: a merge key (<<) takes a mapping or a list of them, got %s", what, describe(src))
			continue
		}
		addMissing(out, d.mapping(src, what, allowed...))
	}
	return true
}

// addMissing adds to out the fields of fields it does not hold.
func addMissing(out, fields map[string]field) {
	for name, f := range fields {
		if _, set := out[name]; !set {
			out[name] = f
		}
	}
}

// suggest returns a hint listing the allowed names, closest first.
func suggest(name string, allowed []string) string {
	if len(allowed) == 0 {
		return ""
	}
	best, bestD := "", math.MaxInt
	for _, a := range allowed {
		if dd := distance(name, a); dd < bestD {
			best, bestD = a, dd
		}
	}
	sorted := append([]string(nil), allowed...)
	sort.Strings(sorted)
	if bestD <= 2 {
		return fmt.Sprintf(" (did you mean %q? known fields: %s)", best, strings.Join(sorted, ", "))
	}
	return " (known fields: " + strings.Join(sorted, ", ") + ")"
}

// distance is the Levenshtein distance of short strings.
func distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return math.MaxInt / 2
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		distanceRow(a[i-1], b, prev, cur)
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// distanceRow fills cur, the Levenshtein row of one more byte c of the
// first string against b, from prev, the row before (cur[0] is set).
func distanceRow(c byte, b string, prev, cur []int) {
	for j := 1; j <= len(b); j++ {
		cost := 1
		if c == b[j-1] {
			cost = 0
		}
		cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
	}
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "something else"
}

// sequence returns the items of list node n.
func (d *decoder) sequence(n *yaml.Node, what string) []*yaml.Node {
	n = d.resolve(n)
	if n == nil {
		return nil
	}
	if isNull(n) && n.Value == "" {
		return nil // "key:" with nothing: an empty list, as YAML 1.1 readers take it
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, "%s must be a list, got %s", what, describe(n))
		return nil
	}
	return n.Content
}

// isNull reports whether n is a null scalar ("key:" with nothing, null
// or ~).
func isNull(n *yaml.Node) bool {
	return n != nil && n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// scalar returns the text of a scalar node that is not null.
func (d *decoder) scalar(n *yaml.Node, what string) (string, bool) {
	n = d.resolve(n)
	if n == nil {
		return "", false
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" {
		d.errorf(n, "%s must be a single value, got %s", what, describe(n))
		return "", false
	}
	return n.Value, true
}

// str returns the text of a scalar; an empty value ("key:") is "", as
// envoyproxy/ratelimit's parser reads it.
func (d *decoder) str(n *yaml.Node, what string) string {
	if r := d.resolve(n); isNull(r) && r.Value == "" {
		return ""
	}
	s, _ := d.scalar(n, what)
	return s
}

func (d *decoder) boolean(n *yaml.Node, what string) bool {
	s, ok := d.scalar(n, what)
	if !ok {
		return false
	}
	// YAML 1.1's spellings too, as envoyproxy/ratelimit's parser reads them.
	switch s {
	case "true", "True", "TRUE", "yes", "Yes", "YES", "y", "Y", "on", "On", "ON":
		return true
	case "false", "False", "FALSE", "no", "No", "NO", "n", "N", "off", "Off", "OFF":
		return false
	}
	d.errorf(n, "%s must be true or false, got %q", what, s)
	return false
}

// integer parses a whole number in [lo, hi].
func (d *decoder) integer(n *yaml.Node, what string, lo, hi int64) (int64, bool) {
	s, ok := d.scalar(n, what)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64)
	if err != nil {
		d.errorf(n, "%s must be a whole number, got %q", what, s)
		return 0, false
	}
	if v < lo || v > hi {
		d.errorf(n, "%s must be between %d and %d, got %d", what, lo, hi, v)
		return 0, false
	}
	return v, true
}

// flag decodes the boolean field name of f, when it is set, into *dst; it
// returns the field and whether it is set.
func (d *decoder) flag(f map[string]field, name string, dst *bool) (field, bool) {
	x, ok := f[name]
	if ok {
		*dst = d.boolean(x.val, name)
	}
	return x, ok
}

// requiredString decodes the string field key of f (what, in messages),
// reporting missing at n when it is not set.
func (d *decoder) requiredString(n *yaml.Node, f map[string]field, key, what, missing string) (field, string, bool) {
	x, ok := f[key]
	if !ok {
		d.errorf(n, "%s", missing)
		return x, "", false
	}
	return x, d.str(x.val, what), true
}

// optString decodes the string field name of f, "" when it is not set.
func (d *decoder) optString(f map[string]field, name, what string) string {
	if x, ok := f[name]; ok {
		return d.str(x.val, what)
	}
	return ""
}
