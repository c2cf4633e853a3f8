package config

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// The field table: every section of sluice's configuration format and its
// fields, with their kinds, defaults, bounds and descriptions. The decoder
// takes the names it accepts (unknown-field detection) and the bounds it
// checks from here, and docs/configuration.md and docs/sluice.schema.json
// are generated from it (go generate ./internal/config), so a field cannot
// be added, nor a bound changed, without its row.

// Kind is the kind of a field's value.
type Kind uint8

// The kinds of values.
const (
	KindString   Kind = iota + 1
	KindBool          // true or false (YAML 1.1 spellings too: yes, on, ...)
	KindInt           // a whole number within Min and Max
	KindDuration      // a Go duration or whole days ("50ms", "15m", "7d") within MinDur and MaxDur
	KindRate          // N/s, N/m, N/h or N/d
	KindEnum          // one of Enum
	KindList          // a list of Item
	KindSection       // a mapping: Section
	KindMap           // a mapping of names to Section (plans)
	KindAny           // any mapping (metadata)
	KindCustom        // several forms: Forms describes them, the schema is Schema
)

// Field is one row of the table.
type Field struct {
	Name string
	Kind Kind
	// Default is the value taken when the field is absent, as written in
	// the file ("" when there is none or it is described in Desc).
	Default string
	// Required fields must be set.
	Required bool
	// Min and Max bound a KindInt; MinDur and MaxDur a KindDuration.
	Min, Max       int64
	MinDur, MaxDur time.Duration
	// Enum lists a KindEnum's values.
	Enum []string
	// Pattern is a regular expression (RE2 and ECMA 262 alike) a string
	// must match, for the schema; the decoder checks the same rule in code.
	Pattern string
	// Item is a KindList's element.
	Item *Field
	// Section is a KindSection's or KindMap's mapping.
	Section *Section
	// Algorithms lists the algorithms that take the field (policies and
	// plans); nil: every algorithm. RequiredBy lists those that need it.
	Algorithms, RequiredBy []driver.Algorithm
	// Desc is the one-line description.
	Desc string
	// Schema is the JSON Schema of a KindCustom field, Type its type as the
	// reference shows it.
	Schema map[string]any
	Type   string
}

// Section is a mapping of the configuration.
type Section struct {
	// Path names it in the reference: "policies[]", "valkey.tls".
	Path string
	// Def names it in the schema's definitions.
	Def    string
	Fields []*Field
	// Exclusive lists pairs of fields that cannot both be set; Together
	// pairs that go together; ExactlyOne fields of which exactly one is
	// set. The decoder checks them in code (with its own messages), the
	// schema from here.
	Exclusive, Together [][]string
	ExactlyOne          []string
	// Rules are the checks the decoder makes that the schema cannot
	// express, for the reference.
	Rules []string
	// schema returns more of the section's rules, as JSON Schema.
	schema func() []any
}

// names lists the section's field names, for unknown-field detection.
func (s *Section) names() []string {
	out := make([]string, len(s.Fields))
	for i, f := range s.Fields {
		out[i] = f.Name
	}
	return out
}

// Field returns the row named name; it panics on a name the table lacks,
// which only a change of the decoder without its row can cause (and every
// test catches).
func (s *Section) Field(name string) *Field {
	for _, f := range s.Fields {
		if f.Name == name {
			return f
		}
	}
	panic(fmt.Sprintf("config: section %s has no field %q in the field table", s.Path, name))
}

// takes reports whether algorithm a takes field f.
func (f *Field) takes(a driver.Algorithm) bool {
	return f.Algorithms == nil || hasAlgorithm(f.Algorithms, a)
}

// requiredBy reports whether algorithm a needs field f.
func (f *Field) requiredBy(a driver.Algorithm) bool { return hasAlgorithm(f.RequiredBy, a) }

func hasAlgorithm(list []driver.Algorithm, a driver.Algorithm) bool {
	for _, x := range list {
		if x == a {
			return true
		}
	}
	return false
}

// fieldsFor lists the algorithm-specific fields of sec that a takes, in
// the table's order.
func fieldsFor(sec *Section, a driver.Algorithm) []string {
	var out []string
	for _, f := range sec.Fields {
		if f.Algorithms != nil && f.takes(a) {
			out = append(out, f.Name)
		}
	}
	return out
}

var (
	fixed    = driver.AlgorithmFixedWindow
	sliding  = driver.AlgorithmSlidingWindow
	slog     = driver.AlgorithmSlidingLog
	tbucket  = driver.AlgorithmTokenBucket
	gcra     = driver.AlgorithmGCRA
	inflight = driver.AlgorithmInFlight
)

// algorithms lists the algorithms in the order the reference shows them.
var algorithms = []driver.Algorithm{fixed, slog, sliding, tbucket, gcra, inflight}

// rateAlgorithms are the algorithms of rate limits (all but in_flight).
var rateAlgorithms = []driver.Algorithm{fixed, slog, sliding, tbucket, gcra}

// grantAlgorithms are the algorithms that take grants (driver.Grantable).
var grantAlgorithms = []driver.Algorithm{fixed, tbucket, gcra}

func str(name, desc string) *Field { return &Field{Name: name, Kind: KindString, Desc: desc} }
func boolean(name, def, desc string) *Field {
	return &Field{Name: name, Kind: KindBool, Default: def, Desc: desc}
}
func enum(name, def, desc string, values ...string) *Field {
	return &Field{Name: name, Kind: KindEnum, Default: def, Enum: values, Desc: desc}
}
func enumFor(name, def string, algs []driver.Algorithm, desc string, values ...string) *Field {
	f := enum(name, def, desc, values...)
	f.Algorithms = algs
	return f
}
func list(name, desc string, item *Field) *Field {
	return &Field{Name: name, Kind: KindList, Item: item, Desc: desc}
}
func section(name, desc string, s *Section) *Field {
	return &Field{Name: name, Kind: KindSection, Section: s, Desc: desc}
}

// addressPattern: host:port (the decoder asks for a colon).
const addressPattern = ":"

// policyNamePattern is checkName's rule: 1 to maxPolicyName of
// [A-Za-z0-9_.-], not "." nor "..", written without lookahead (RE2 and
// ECMA 262 alike): a name starts with a character other than a dot, or
// with one dot and another character, or with two dots and more.
var policyNamePattern = fmt.Sprintf("^([A-Za-z0-9_-][A-Za-z0-9_.-]{0,%d}|\\.[A-Za-z0-9_-][A-Za-z0-9_.-]{0,%d}|\\.\\.[A-Za-z0-9_.-]{1,%d})$",
	maxPolicyName-1, maxPolicyName-2, maxPolicyName-2)

// boolSpellings are the YAML 1.1 spellings of booleans the decoder reads
// as envoyproxy/ratelimit's parser does, for the schema (YAML 1.2 readers
// take them as strings).
var boolSpellings = []string{"true", "True", "TRUE", "yes", "Yes", "YES", "y", "Y", "on", "On", "ON",
	"false", "False", "FALSE", "no", "No", "NO", "n", "N", "off", "Off", "OFF"}

var tlsSection = &Section{Path: "valkey.tls", Def: "tls", Fields: []*Field{
	str("ca_file", "PEM certificates of the authorities to trust (default: the system's)"),
	str("cert_file", "client certificate (mutual TLS), with key_file"),
	str("key_file", "the client certificate's key, with cert_file"),
	str("server_name", "the name checked in the server's certificate (default: the address's host)"),
}, Together: [][]string{{"cert_file", "key_file"}}}

var sentinelSection = &Section{Path: "valkey.sentinel", Def: "sentinel", Fields: []*Field{
	{Name: "master_set", Kind: KindString, Required: true, Desc: "the name the Sentinels monitor, such as mymaster"},
	{Name: "addresses", Kind: KindList, Required: true, Item: &Field{Kind: KindString, Pattern: addressPattern}, Min: 1,
		Desc: "the Sentinels, host:port, at least one"},
	str("username", "the Sentinels' user"),
	str("password_env", "environment variable holding the Sentinels' password"),
	str("password_file", "file holding the Sentinels' password (trailing newline removed)"),
}, Exclusive: [][]string{{"password_env", "password_file"}}}

var valkeySection = &Section{Path: "valkey", Def: "valkey", Fields: []*Field{
	list("addresses", "one server, or seed addresses of a cluster (host:port); absent: sluice serve --valkey",
		&Field{Kind: KindString, Pattern: addressPattern}),
	{Name: "address", Kind: KindString, Pattern: addressPattern, Desc: "one server (host:port), instead of addresses"},
	str("username", "Valkey user (ACL)"),
	str("password_env", "environment variable holding the password (never the password itself)"),
	str("password_file", "file holding the password (trailing newline removed)"),
	{Name: "tls", Kind: KindCustom, Type: "boolean or [`valkey.tls`](#valkeytls)", Desc: "true for TLS with the system's authorities, or a mapping (valkey.tls)",
		Schema: map[string]any{"anyOf": []any{boolSchema(), ref("tls")}}},
	{Name: "timeout", Kind: KindDuration, Default: sluice.DefaultTimeout.String(), MinDur: time.Millisecond, MaxDur: time.Minute,
		Desc: "bounds each decision; past it, the policy's on_failure decides"},
	{Name: "connect_timeout", Kind: KindDuration, Default: DefaultConnectTimeout.String(), MinDur: time.Millisecond, MaxDur: 5 * time.Minute,
		Desc: "bounds each connection attempt"},
	section("sentinel", "find the master through Valkey Sentinel (valkey.sentinel), instead of address(es)", sentinelSection),
}, Exclusive: [][]string{{"address", "addresses"}, {"sentinel", "address"}, {"sentinel", "addresses"}, {"password_env", "password_file"}}}

var adminSection = &Section{Path: "admin", Def: "admin", Fields: []*Field{
	str("token_env", "environment variable holding the admin bearer token (at least 16 characters)"),
	str("token_file", "file holding the admin bearer token"),
}, ExactlyOne: []string{"token_env", "token_file"}, Rules: []string{"sluice serve refuses a token shorter than 16 characters when it starts"}}

// plansSection is a plan's fields: the numbers that differ from its
// policy's.
var plansSection = &Section{Path: "policies[].plans.NAME", Def: "plan", Fields: []*Field{
	{Name: "limit", Kind: KindInt, Min: 1, Max: driver.MaxLimit, Algorithms: []driver.Algorithm{fixed, slog, sliding},
		RequiredBy: []driver.Algorithm{fixed, slog, sliding}, Desc: "the plan's limit (required for fixed_window, sliding_log, sliding_window)"},
	{Name: "burst", Kind: KindInt, Min: 1, Max: driver.MaxLimit, Algorithms: []driver.Algorithm{tbucket, gcra},
		RequiredBy: []driver.Algorithm{tbucket, gcra}, Desc: "the plan's burst (required for token_bucket, gcra)"},
	{Name: "rate", Kind: KindRate, Algorithms: []driver.Algorithm{tbucket, gcra}, Desc: "the plan's rate (default: the policy's)"},
}, Rules: []string{"the plan's numbers must make a valid policy with the policy's window or period"}}

var policySection = &Section{Path: "policies[]", Def: "policy", Fields: []*Field{
	{Name: "name", Kind: KindString, Required: true, Pattern: policyNamePattern,
		Desc: fmt.Sprintf("unique name, 1 to %d of [A-Za-z0-9_.-], not . nor ..", maxPolicyName)},
	{Name: "algorithm", Kind: KindEnum, Required: true, Enum: algorithmNames(), Desc: "the algorithm (docs/algorithms.md)"},
	{Name: "limit", Kind: KindInt, Min: 1, Max: driver.MaxLimit, Algorithms: []driver.Algorithm{fixed, slog, sliding, inflight},
		RequiredBy: []driver.Algorithm{fixed, slog, sliding, inflight},
		Desc: fmt.Sprintf("requests allowed per window (sliding_log: at most %d); in_flight: leases at once per key (at most %d)",
			driver.MaxSlidingLogLimit, driver.MaxInFlightLimit)},
	{Name: "window", Kind: KindDuration, MinDur: driver.MinWindow, MaxDur: driver.MaxWindow, Algorithms: []driver.Algorithm{fixed, slog, sliding},
		RequiredBy: []driver.Algorithm{slog, sliding},
		Desc:       "the window (fixed_window: or period)"},
	{Name: "lease", Kind: KindDuration, MinDur: driver.MinWindow, MaxDur: driver.MaxWindow, Algorithms: []driver.Algorithm{inflight},
		RequiredBy: []driver.Algorithm{inflight},
		Desc:       "in_flight: a lease ends this long after it was acquired or last renewed, unless released first"},
	{Name: "period", Kind: KindEnum, Enum: []string{"day", "week", "month"}, Algorithms: []driver.Algorithm{fixed},
		Desc: "a calendar period instead of window, with zone"},
	{Name: "zone", Kind: KindString, Algorithms: []driver.Algorithm{fixed},
		Desc: "IANA time zone of the period (America/Los_Angeles, UTC), required with period"},
	{Name: "renewal_day", Kind: KindInt, Default: "1", Min: 1, Max: 31, Algorithms: []driver.Algorithm{fixed},
		Desc: "period: month only: the day it renews, clamped to the month's end"},
	{Name: "burst", Kind: KindInt, Min: 1, Max: driver.MaxLimit, Algorithms: []driver.Algorithm{tbucket, gcra},
		RequiredBy: []driver.Algorithm{tbucket, gcra}, Desc: "bucket capacity / burst"},
	{Name: "rate", Kind: KindRate, Algorithms: []driver.Algorithm{tbucket, gcra}, RequiredBy: []driver.Algorithm{tbucket, gcra}, Desc: "refill rate: N/s, N/m, N/h or N/d (N may be a decimal)"},
	{Name: "count_rejected", Kind: KindBool, Default: "false", Algorithms: []driver.Algorithm{slog},
		Desc: "refused attempts count too (a lockout)"},
	enum("on_failure", "allow", "when Valkey cannot decide in time: allow, deny, or share (grants: decide on the process's share of the limit)", "allow", "deny", "share"),
	boolean("shadow", "false", "never refuse: report \"shadow\": true instead"),
	{Name: "headers", Kind: KindCustom, Default: "all", Type: "a name or a list of names", Algorithms: rateAlgorithms,
		Desc: "response headers: all, none, or one or a list of x-ratelimit, ietf, retry-after",
		Schema: map[string]any{"anyOf": []any{
			map[string]any{"enum": headerValues()},
			map[string]any{"type": "array", "items": map[string]any{"enum": headerValues()}},
		}}},
	{Name: "timeout", Kind: KindDuration, Default: "valkey.timeout", MinDur: time.Millisecond, MaxDur: time.Minute,
		Desc: "bounds each decision of this policy"},
	str("description", "free text shown by GET /v1/policies"),
	enum("show_keys", "hashed", "how keys appear among the top refused: hashed, truncated or raw", "hashed", "truncated", "raw"),
	{Name: "overrides", Kind: KindBool, Default: "false", Algorithms: rateAlgorithms, Desc: "read key overrides (PUT /v1/overrides/POLICY/KEY)"},
	{Name: "max_debt", Kind: KindInt, Default: "the limit", Min: 0, Max: driver.MaxLimit, Algorithms: []driver.Algorithm{fixed, tbucket, gcra},
		Desc: "reservations (POST /v1/reservations/settle): the most a settle above its estimate may leave owed, in units beyond the limit; 0 for none"},
	{Name: "plans", Kind: KindMap, Section: plansSection, Algorithms: rateAlgorithms, Desc: "named plans: plan name → {limit} or {burst, rate}"},
	{Name: "deny_cache", Kind: KindBool, Default: "true", Algorithms: rateAlgorithms,
		Desc: "answer refused keys locally until their retry-after (true is refused with count_rejected, overrides, plans or grants, where it is off)"},
	enumFor("grants", "off", grantAlgorithms, "auto: each process decides locally against grants of each key's limit, renewed on Valkey (docs/grants.md); off: every decision on Valkey", "auto", "off"),
	{Name: "grant_life", Kind: KindDuration, Default: "2s", MinDur: 10 * time.Millisecond, MaxDur: driver.MaxGrantLife, Algorithms: grantAlgorithms,
		Desc: "grants: how long a grant lasts unless renewed, by Valkey's clock (whole milliseconds): a process that dies strands its units this long"},
	{Name: "grant_period", Kind: KindDuration, Default: "grant_life / 4", MinDur: time.Millisecond, MaxDur: driver.MaxGrantLife / 2, Algorithms: grantAlgorithms,
		Desc: "grants: the time over which demand sizes a grant, after which a quiet key gives its units back (at most grant_life / 2)"},
	{Name: "grant_max_keys", Kind: KindInt, Default: "10000", Min: 1, Max: 10_000_000, Algorithms: grantAlgorithms,
		Desc: "grants: the keys whose grants a process holds at once; one more gives another's units back"},
	{Name: "warn_at", Kind: KindInt, Algorithms: rateAlgorithms, Min: 1, Max: 99,
		Desc: "percent of the limit used from which an allowed decision warns (\"warning\": true, sluice_warnings_total); absent: no warning"},
	{Name: "warning_header", Kind: KindBool, Algorithms: rateAlgorithms, Default: "false",
		Desc: "send X-RateLimit-Warning, naming the policy, with decisions that warn (needs warn_at)"},
	{Name: "deny_status", Kind: KindInt, Algorithms: rateAlgorithms, Default: "429", Min: 400, Max: 599,
		Desc: "HTTP status of refusals, such as 503 for a limit that protects capacity (forward auth, /v1/check's deny_status)"},
	{Name: "deny_body", Kind: KindAny, Algorithms: rateAlgorithms,
		Desc: "a mapping sent as the JSON body of refusals (application/json) instead of problem+json"},
	{Name: "wait", Kind: KindDuration, Algorithms: rateAlgorithms, MinDur: time.Millisecond, MaxDur: MaxWait,
		Desc: "how long a refused request of /v1/check, reservations or forward auth may wait for admission, all told, before it is refused (absent: refused at once; docs/beyond-refusing.md)"},
	{Name: "penalty", Kind: KindSection, Section: penaltySection, Algorithms: rateAlgorithms,
		Desc: "block a key refused `after` times within `within`, for longer each time (policies[].penalty; \"blocked\": true, sluice_blocks_total)"},
}, Rules: []string{
	fmt.Sprintf("token_bucket, gcra: refilling from empty within %s (driver.MaxWindow)", duration(driver.MaxWindow)),
	"zone is a known IANA time zone; a rate is positive; durations within their bounds",
	"deny_cache: true is refused with count_rejected, overrides, plans or grants",
	"grants: auto is refused with plans, overrides: true, max_debt, warn_at or penalty; grant_life, grant_period, grant_max_keys and on_failure: share need grants: auto",
	"a policy with grants is used by no forward_auth route and by no descriptor of a domain with counting all_or_nothing",
	"warning_header needs warn_at",
	"a policy an Envoy descriptor uses takes no deny_status, deny_body or warning_header (Envoy's filter chooses the refusal), nor wait",
	"wait is refused with count_rejected; wait, deny_status and deny_body are refused with shadow: true (a shadow policy never refuses)",
	"policy names are unique",
}}

var rateLimitSection = &Section{Path: "domains[].descriptors[].rate_limit", Def: "rate_limit", Fields: []*Field{
	{Name: "unit", Kind: KindEnum, Enum: envoyUnitNames(), Desc: "second, minute, hour, day, week, month (30 days) or year (365 days), any case"},
	{Name: "requests_per_unit", Kind: KindInt, Min: 0, Max: 1<<32 - 1, Desc: "requests allowed per unit; 0 refuses every request"},
	{Name: "unit_multiplier", Kind: KindInt, Default: "1", Min: 1, Max: 1 << 20, Desc: "the window is this many units"},
	boolean("unlimited", "false", "never limit (requests_per_unit is ignored; unit is refused)"),
	str("name", "the limit's name, for replaces and the generated policy's name"),
	list("replaces", "limits this one replaces when both apply to one request", &Field{Kind: KindSection, Section: replacesSection}),
}, Rules: []string{"a replaces entry does not name the limit itself"}}

var replacesSection = &Section{Path: "domains[].descriptors[].rate_limit.replaces[]", Def: "replaces", Fields: []*Field{
	{Name: "name", Kind: KindString, Required: true, Desc: "a limit's name"},
}}

var descriptorSection = &Section{Path: "domains[].descriptors[]", Def: "descriptor", Fields: []*Field{
	{Name: "key", Kind: KindString, Required: true, Desc: "the descriptor entry's key"},
	str("value", "the entry's value ('*' matches by wildcard); absent: any value"),
	{Name: "rate_limit", Kind: KindCustom, Type: "[`rate_limit`](#domainsdescriptorsrate_limit) or empty", Desc: "an envoyproxy/ratelimit limit (empty: none)",
		Schema: map[string]any{"anyOf": []any{map[string]any{"type": "null"}, ref("rate_limit")}}},
	{Name: "descriptors", Kind: KindList, Item: &Field{Kind: KindSection, Section: nil}, Desc: "nested descriptors"},
	boolean("shadow_mode", "false", "observe the limit, never enforce it"),
	boolean("detailed_metric", "false", "label its metrics with the request's values"),
	boolean("value_to_metric", "false", "label its metrics with the request's value at this level"),
	boolean("share_threshold", "false", "all values matching the wildcard value share one counter"),
	str("policy", "a policy of policies (sluice's format), instead of rate_limit"),
	boolean("quota_mode", "false", "a refusal refuses the request only when every quota descriptor refuses"),
	{Name: "metadata", Kind: KindAny, Desc: "any mapping, returned as dynamic metadata"},
	boolean("plan_entry", "false", "the request's value names the plan of policy (no value)"),
}, Exclusive: [][]string{{"policy", "rate_limit"}}, Rules: []string{
	"policy names a policy defined under policies", "share_threshold needs a wildcard value",
	"plan_entry needs policy (a policy with plans) and no value", "a key and value pair is defined once among its siblings",
}}

var domainSection = &Section{Path: "domains[]", Def: "domain", Fields: []*Field{
	{Name: "domain", Kind: KindString, Required: true, Desc: "the Envoy rate-limit domain"},
	enum("counting", "all_or_nothing (each in envoyproxy/ratelimit's format)",
		"all_or_nothing: a refused request takes nothing; each: every descriptor counts its own hits", "all_or_nothing", "each"),
	list("descriptors", "the descriptor tree", &Field{Kind: KindSection, Section: descriptorSection}),
}, Rules: []string{"domain names are unique"}}

var routeLimitSection = &Section{Path: "forward_auth.routes[].limits[]", Def: "route_limit", Fields: []*Field{
	{Name: "policy", Kind: KindString, Required: true, Desc: "a policy of policies"},
	{Name: "key", Kind: KindCustom, Required: true, Type: "a key source, a list or a mapping",
		Desc:   "client_ip, header:NAME or claim:NAME; a list of them (the first present counts); {all: [...]} (each present counts) or {first: [...]}",
		Schema: keySchema()},
}, Rules: []string{"policy names a policy defined under policies", "a key source is listed once"}}

var routeSection = &Section{Path: "forward_auth.routes[]", Def: "route", Fields: []*Field{
	str("name", "the route's name in logs (default: route N)"),
	{Name: "path_prefix", Kind: KindString, Pattern: "^/", Desc: "normalised path prefix, matched segment by segment (default: every path)"},
	list("methods", "upper-case HTTP methods (default: every method)", &Field{Kind: KindString, Pattern: "^[A-Z][^a-z \t/:]*$"}),
	str("host", "host without port, or *.domain (default: every host)"),
	{Name: "limits", Kind: KindList, Required: true, Min: 1, Item: &Field{Kind: KindSection, Section: routeLimitSection},
		Desc: "the limits that apply: a list of {policy, key}"},
}, Rules: []string{"path_prefix is a normalised path", "host is a host name without port, or *.domain"}}

var forwardAuthSection = &Section{Path: "forward_auth", Def: "forward_auth", Fields: []*Field{
	{Name: "trusted_proxies", Kind: KindList, Required: true, Min: 1, Item: &Field{Kind: KindString},
		Desc: "networks of the proxies that call sluice (CIDR or address)"},
	str("client_ip_header", "the header the proxies put the client's address in (default X-Forwarded-For)"),
	enum("path_case", "insensitive", "insensitive: /LOGIN is matched as /login; sensitive: as written", "insensitive", "sensitive"),
	enum("unmatched", "allow", "a request no route applies to: allow (no limit) or deny", "allow", "deny"),
	{Name: "routes", Kind: KindList, Required: true, Item: &Field{Kind: KindSection, Section: routeSection},
		Desc: "tried in order; the first that applies decides"},
}}

var topSection = &Section{Path: "(top level)", Def: "sluice", Fields: []*Field{
	{Name: "prefix", Kind: KindString, Default: sluice.DefaultPrefix, Pattern: "^[^{} \t\r\n]{1,64}$", Max: 64,
		Desc: "first part of every key: 1 to 64 characters without braces or spaces"},
	{Name: "listen", Kind: KindString, Pattern: addressPattern, Desc: "HTTP address, host:port (the --listen flag wins)"},
	{Name: "grpc_listen", Kind: KindString, Pattern: addressPattern, Desc: "gRPC address, host:port (the --grpc-listen flag wins)"},
	section("valkey", "how to reach Valkey; absent: the in-process store (limits per process)", valkeySection),
	section("admin", "the admin routes' token; absent: the admin routes are off", adminSection),
	list("policies", "named policies", &Field{Kind: KindSection, Section: policySection}),
	list("domains", "Envoy rate-limit domains: descriptors mapped to policies or to envoyproxy/ratelimit limits",
		&Field{Kind: KindSection, Section: domainSection}),
	section("forward_auth", "route rules for reverse proxies (docs/proxies.md); absent: the forward-auth endpoints are off", forwardAuthSection),
	{Name: "max_waiting", Kind: KindInt, Default: fmt.Sprint(DefaultMaxWaiting), Min: 1, Max: MaxWaitingBound,
		Desc: "the most requests waiting for admission at once (policies' wait), in this process; past it a request is refused at once"},
	{Name: "max_waiting_per_key", Kind: KindInt, Default: fmt.Sprint(DefaultMaxWaitingPerKey), Min: 1, Max: MaxWaitingBound,
		Desc: "the most requests waiting at once for one key of one policy, in this process"},
}, Rules: []string{"at least one policy or domain", "max_waiting and max_waiting_per_key need a policy with wait"}}

// Sections lists the sections in the reference's order.
var Sections = []*Section{topSection, valkeySection, tlsSection, sentinelSection, adminSection,
	policySection, plansSection, penaltySection, domainSection, descriptorSection, rateLimitSection, replacesSection,
	forwardAuthSection, routeSection, routeLimitSection}

func init() {
	// The descriptor tree is recursive.
	descriptorSection.Field("descriptors").Item.Section = descriptorSection
	// The per-algorithm rules read the table.
	policySection.schema = policyRules
	rateLimitSection.schema = rateLimitRules
}

func algorithmNames() []string {
	out := make([]string, len(algorithms))
	for i, a := range algorithms {
		out[i] = a.String()
	}
	return out
}

func headerValues() []string {
	out := []string{"all", "none"}
	for _, h := range headerNames {
		out = append(out, h.name)
	}
	return out
}

func envoyUnitNames() []string {
	var out []string
	for _, u := range []string{"second", "minute", "hour", "day", "week", "month", "year"} {
		out = append(out, u, upper(u), upper(u[:1])+u[1:])
	}
	return out
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// keySourcePattern is parseKeySource's rule, for the schema.
var keySourcePattern = fmt.Sprintf("^(client_ip|(header|claim):[!#$%%&'*+.^_`|~0-9A-Za-z-]{1,%d})$", maxHeaderName)

func keySchema() map[string]any {
	src := map[string]any{"type": "string", "pattern": keySourcePattern}
	srcs := map[string]any{"type": "array", "minItems": 1, "items": src}
	return map[string]any{"anyOf": []any{
		src,
		srcs,
		map[string]any{"type": "object", "additionalProperties": false, "minProperties": 1, "maxProperties": 1,
			"properties": map[string]any{"first": srcs, "all": srcs}},
	}}
}
