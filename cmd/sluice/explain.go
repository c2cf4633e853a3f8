package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/envoy"
)

const explainUsage = `usage: sluice explain [--config FILE] [--json] DOMAIN KEY=VALUE [KEY=VALUE...]

Explains how sluice serve's Envoy rate-limit service matches one request
descriptor (its entries in order) against DOMAIN's descriptor tree: at each
level which entry matched and why (an exact key and value first, then a
wildcard value, then the key alone), where matching stopped if it did, and
which limit applies. It reads the configuration only; nothing is counted.
Exit code 1 when the descriptor matches nothing.

flags:
`

// explainLevel is one level of a match.
type explainLevel struct {
	Entry string `json:"entry"`
	// Matched is the tree's descriptor that matched, as key=value or key.
	Matched string `json:"matched,omitempty"`
	// Why is "exact value", "wildcard value" or "key only".
	Why  string `json:"why,omitempty"`
	Line int    `json:"line,omitempty"`
	// Others are the other descriptors of this level with the same key:
	// Match prefers the most specific.
	Others []string `json:"not_chosen,omitempty"`
}

// explanation is what explain prints.
type explanation struct {
	Domain  string         `json:"domain"`
	Levels  []explainLevel `json:"levels"`
	Matched bool           `json:"matched"`
	// Stopped says why the descriptor matches nothing.
	Stopped string `json:"stopped,omitempty"`
	// Applies is the limit: a policy, unlimited, deny, or none.
	Applies string `json:"applies,omitempty"`
	Policy  string `json:"policy,omitempty"`
	// CountedAs is the entries the request is counted as.
	CountedAs []string `json:"counted_as,omitempty"`
	// Key is the key it is counted under, as sluice inspect, reset and
	// override take it; Plan the plan its last entry names.
	Key   string   `json:"key,omitempty"`
	Plan  string   `json:"plan,omitempty"`
	Notes []string `json:"notes,omitempty"`
}

func runExplain(_ context.Context, args []string, _ func(string) (string, bool), stdout, stderr io.Writer) int {
	fs := newFlags("explain")
	of := addOpsFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	entries, code, ok := parseExplainArgs(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	cfg, err := of.load(false)
	if err != nil {
		fmt.Fprintf(stderr, "sluice explain: %v\n", err)
		return 1
	}
	dom := cfg.Domain(fs.Arg(0))
	if dom == nil {
		fmt.Fprintf(stderr, "sluice explain: unknown domain %q: %s defines %s\n", fs.Arg(0), cfg.Source, orNone(domainNames(cfg)))
		return 2
	}
	ex := explain(cfg, dom, entries)
	writeOutput(stdout, ex, *asJSON, (*explanation).write)
	if !ex.Matched {
		return 1
	}
	return 0
}

// parseExplainArgs parses explain's command line into fs and returns
// the descriptor's entries; ok is false, with the exit code, when the
// command is not to run.
func parseExplainArgs(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) ([]config.Entry, int, bool) {
	if code, ok := parseFlags(fs, explainUsage, args, stdout, stderr); !ok {
		return nil, code, false
	}
	if fs.NArg() < 2 {
		return nil, usageError(fs, stderr, "want a DOMAIN and at least one KEY=VALUE entry"), false
	}
	entries, bad := parseEntries(fs.Args()[1:])
	if bad != "" {
		return nil, usageError(fs, stderr, "entry %q: want KEY=VALUE", bad), false
	}
	return entries, 0, true
}

// parseEntries parses KEY=VALUE arguments into descriptor entries; bad
// is the first argument that is not one (no "=", or an empty key).
func parseEntries(args []string) (entries []config.Entry, bad string) {
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, a
		}
		entries = append(entries, config.Entry{Key: k, Value: v})
	}
	return entries, ""
}

// domainNames are the names of cfg's domains, in order.
func domainNames(cfg *config.Config) []string {
	var names []string
	for _, d := range cfg.Domains {
		names = append(names, d.Name)
	}
	return names
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// explain describes how dom matches entries, with the config package's
// own matching (Domain.Walk, config.CountedAs): it only classifies and
// describes what Walk chose.
func explain(cfg *config.Config, dom *config.Domain, entries []config.Entry) *explanation {
	ex := &explanation{Domain: dom.Name}
	path := longestMatch(dom, entries)
	ex.Levels = explainLevels(dom.Descriptors, path, entries)
	ex.Matched = len(path) == len(entries)
	if !ex.Matched {
		ex.Stopped = whyStopped(dom, path, entries)
		ex.Applies = "nothing: the request is allowed and not counted"
		return ex
	}
	explainApplies(ex, cfg, dom, path, entries)
	ex.Notes = nodeNotes(path[len(path)-1])
	if p := cfg.Policy(ex.Policy); ex.Policy != "" && p != nil && p.Grants {
		ex.Notes = append(ex.Notes, grantsNote)
	}
	return ex
}

// grantsNote is what a policy with grants means for a decision.
const grantsNote = "grants: auto: each sluice serve instance decides against its own grant of the key's limit (docs/grants.md): " +
	"a refusal is that instance's, and other instances may hold units they have not used " +
	"(together they never admit more than the limit, and may admit less, within the bound of docs/grants.md); " +
	"its retry-after is when that instance can next get units, its remaining that instance's units; " +
	"sluice inspect shows the key's grants and their holders"

// longestMatch is the path of the longest prefix of entries that matches:
// Walk of a prefix is the path of the whole up to there.
func longestMatch(dom *config.Domain, entries []config.Entry) []*config.Descriptor {
	var path []*config.Descriptor
	for n := len(entries); n > 0; n-- {
		if path = dom.Walk(entries[:n]); path != nil {
			break
		}
	}
	return path
}

// explainLevels describes, entry by entry, the descriptor of path it
// matched, why, and the other descriptors with its key at that level
// (top is the domain's top level).
func explainLevels(top []*config.Descriptor, path []*config.Descriptor, entries []config.Entry) []explainLevel {
	var out []explainLevel
	level := top
	for i, e := range entries {
		l := explainLevel{Entry: e.Key + "=" + e.Value}
		if i < len(path) {
			l.describe(level, path[i], e)
			level = path[i].Children
		}
		out = append(out, l)
	}
	return out
}

// describe notes in l the descriptor node of level that matched e, why,
// and the other descriptors of level with e's key.
func (l *explainLevel) describe(level []*config.Descriptor, node *config.Descriptor, e config.Entry) {
	l.Matched, l.Line = describeNode(node), node.Line
	switch {
	case node.Value == "":
		l.Why = "key only: any value"
	case node.Value == e.Value:
		l.Why = "exact value"
	default:
		l.Why = "wildcard value"
	}
	for _, c := range level {
		if c != node && c.Key == e.Key {
			l.Others = append(l.Others, describeNode(c))
		}
	}
}

// whyStopped says why path, shorter than entries, matched no further.
func whyStopped(dom *config.Domain, path []*config.Descriptor, entries []config.Entry) string {
	switch {
	case len(path) == 0:
		return fmt.Sprintf("no descriptor with key %q at the top of domain %s (its keys: %s)", entries[0].Key, dom.Name, keysOf(dom.Descriptors))
	case len(path[len(path)-1].Children) == 0:
		return fmt.Sprintf("%s has no deeper descriptors: a descriptor deeper than the tree matches nothing", describeNode(path[len(path)-1]))
	default:
		e := entries[len(path)]
		return fmt.Sprintf("no descriptor for %s=%s under %s (its keys: %s)", e.Key, e.Value, describeNode(path[len(path)-1]), keysOf(path[len(path)-1].Children))
	}
}

// explainApplies fills in what applies to a request matching the whole
// path: its policy, counted key and plan, or why none.
func explainApplies(ex *explanation, cfg *config.Config, dom *config.Domain, path []*config.Descriptor, entries []config.Entry) {
	node := path[len(path)-1]
	switch {
	case node.Unlimited:
		ex.Applies = "unlimited: always allowed"
	case node.Deny:
		ex.Applies = "requests_per_unit 0: always refused"
	case node.Policy != "":
		ex.appliesPolicy(cfg, dom, path, entries)
	default:
		ex.Applies = "no limit at this descriptor (it only groups deeper ones): allowed, not counted"
	}
}

// appliesPolicy fills in the policy of path's last descriptor, the
// entries and key the request is counted as, and the policy's rule.
func (ex *explanation) appliesPolicy(cfg *config.Config, dom *config.Domain, path []*config.Descriptor, entries []config.Entry) {
	node := path[len(path)-1]
	ex.Policy = node.Policy
	ex.Applies = "policy " + node.Policy
	for _, c := range config.CountedAs(path, entries) {
		ex.CountedAs = append(ex.CountedAs, c.Key+"="+c.Value)
	}
	ex.Key, ex.Plan = envoy.CountedKey(dom.Name, path, entries)
	p := cfg.Policy(node.Policy)
	if p == nil {
		return
	}
	rule, _ := p.Policy.Rule()
	ex.Applies += ": " + rule.String()
	if p.Envoy && node.Limit != nil {
		ex.Applies += fmt.Sprintf(" (rate_limit %d per %d %s)", node.Limit.RequestsPerUnit, node.Limit.Multiplier, strings.ToLower(node.Limit.Unit))
	}
}

// nodeNotes are the settings of node that change how it counts or refuses.
func nodeNotes(node *config.Descriptor) []string {
	var notes []string
	if node.Shadow {
		notes = append(notes, "shadow_mode: counted and reported, never refused")
	}
	if node.QuotaMode {
		notes = append(notes, "quota_mode: its refusal refuses the request only when every quota descriptor of it refuses")
	}
	if node.ShareThreshold {
		notes = append(notes, "share_threshold: every value matching "+node.Value+" shares one counter")
	}
	if node.Limit != nil && len(node.Limit.Replaces) > 0 {
		notes = append(notes, "replaces "+strings.Join(node.Limit.Replaces, ", ")+" when both apply to one request")
	}
	return notes
}

func describeNode(d *config.Descriptor) string {
	if d.Value == "" {
		return d.Key
	}
	return d.Key + "=" + d.Value
}

func keysOf(level []*config.Descriptor) string {
	var out []string
	for _, d := range level {
		out = append(out, describeNode(d))
	}
	return orNone(out)
}

// write writes ex as text: a line a level, then what applies.
func (ex *explanation) write(w io.Writer) {
	fmt.Fprintf(w, "domain %s\n", ex.Domain)
	for i, l := range ex.Levels {
		l.write(w, i+1)
	}
	if ex.Stopped != "" {
		fmt.Fprintf(w, "no match: %s\n", ex.Stopped)
	}
	fmt.Fprintf(w, "applies: %s\n", ex.Applies)
	writeCounted(w, ex)
	for _, n := range ex.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// write writes level n: its entry and what it matched, and the
// descriptors not chosen.
func (l explainLevel) write(w io.Writer, n int) {
	if l.Matched == "" {
		fmt.Fprintf(w, "  %d. %-30s no match\n", n, l.Entry)
		return
	}
	fmt.Fprintf(w, "  %d. %-30s matched %s (%s, line %d)\n", n, l.Entry, l.Matched, l.Why, l.Line)
	if len(l.Others) > 0 {
		fmt.Fprintf(w, "     %-30s not chosen: %s (the most specific wins: exact value, then wildcard, then key only)\n", "", strings.Join(l.Others, ", "))
	}
}

// writeCounted writes what ex's request is counted as, under which key
// and plan, each when known.
func writeCounted(w io.Writer, ex *explanation) {
	if len(ex.CountedAs) > 0 {
		fmt.Fprintf(w, "counted as: %s\n", strings.Join(ex.CountedAs, ", "))
	}
	if ex.Key != "" {
		fmt.Fprintf(w, "key: %s (sluice inspect %s %s)\n", ex.Key, ex.Policy, shellQuote(ex.Key))
	}
	if ex.Plan != "" {
		fmt.Fprintf(w, "plan: %s\n", ex.Plan)
	}
}

// shellQuote quotes s for a POSIX shell when it holds anything but
// letters, digits and -_.:/@=+, (a key with \ or a space, say).
func shellQuote(s string) string {
	for i := 0; i < len(s); i++ {
		if !shellSafe(s[i]) {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}

// shellSafe reports whether c stands for itself in a POSIX shell word:
// a letter, a digit or one of -_.:/@=+,
func shellSafe(c byte) bool {
	return strings.IndexByte(shellSafeBytes, c) >= 0
}

// shellSafeBytes are the bytes shellSafe accepts.
const shellSafeBytes = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/@=+,"
