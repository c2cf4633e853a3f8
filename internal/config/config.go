// Package config reads the YAML configuration of sluice serve.
//
// Two formats are accepted, told apart by their top-level keys:
//
//   - Sluice's own: valkey, admin, prefix, listen, grpc_listen, policies (named
//     policies of any algorithm) and domains (Envoy descriptors mapped to
//     policies or to envoyproxy/ratelimit-style limits).
//   - envoyproxy/ratelimit's: a top-level domain with nested descriptors, so
//     its users can switch with their configuration unchanged. Its limits are
//     fixed windows of one unit, as in envoyproxy/ratelimit.
//
// Decoding is strict: unknown fields, bad durations and rates, impossible
// limits are refused, each error naming file:line:column.
package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"go.yaml.in/yaml/v3"
)

// MaxFileSize is the largest configuration file read.
const MaxFileSize = 4 << 20

// DefaultConnectTimeout is the time allowed to open a connection to Valkey.
const DefaultConnectTimeout = 2 * time.Second

// maxPolicyName keeps room for the algorithm suffix in the limiter name,
// which must stay within 64 characters.
const maxPolicyName = 48

// Config is a validated configuration.
type Config struct {
	// Source names where the configuration came from, for logs.
	Source string
	// Prefix is the first part of every key (default sluice.DefaultPrefix).
	Prefix string
	// Listen and GRPCListen are the addresses to serve on; empty means the
	// command line's (or its defaults).
	Listen, GRPCListen string
	// Valkey is nil when the in-process store is to be used.
	Valkey *Valkey
	// Admin is nil when the admin routes are off.
	Admin *Admin
	// Policies in file order; those generated for Envoy descriptors with a
	// rate_limit come after the named ones.
	Policies []*Policy
	// Domains are the Envoy rate-limit domains.
	Domains []*Domain
}

// Policy returns the policy named name, or nil.
func (c *Config) Policy(name string) *Policy {
	for _, p := range c.Policies {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Domain returns the Envoy domain named name, or nil.
func (c *Config) Domain(name string) *Domain {
	for _, d := range c.Domains {
		if d.Name == name {
			return d
		}
	}
	return nil
}

// Valkey says how to reach Valkey.
type Valkey struct {
	// Addresses of one server, or seed addresses of a cluster (several
	// addresses: the client discovers the topology). Empty when they are to
	// come from the command line (sluice serve --valkey).
	Addresses []string
	Username  string
	// PasswordEnv names an environment variable holding the password;
	// PasswordFile a file holding it (trailing newline removed). At most one.
	PasswordEnv, PasswordFile string
	// TLS is nil for plain TCP.
	TLS *TLS
	// Timeout bounds each decision (default sluice.DefaultTimeout, 50ms);
	// when it passes, the policy's on_failure decides.
	Timeout time.Duration
	// ConnectTimeout bounds opening a connection (default 2s).
	ConnectTimeout time.Duration
}

// Password reads the password from the environment variable or file; env
// is the environment to look in (nil: the process environment).
func (v *Valkey) Password(env func(string) (string, bool)) (string, error) {
	switch {
	case v.PasswordEnv != "":
		if env == nil {
			env = os.LookupEnv
		}
		p, ok := env(v.PasswordEnv)
		if !ok {
			return "", fmt.Errorf("valkey.password_env: environment variable %s is not set", v.PasswordEnv)
		}
		return p, nil
	case v.PasswordFile != "":
		b, err := readSmallFile(v.PasswordFile)
		if err != nil {
			return "", fmt.Errorf("valkey.password_file: %w", err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	return "", nil
}

// TLS configures TLS to Valkey.
type TLS struct {
	// CAFile holds PEM certificates of the authorities to trust (default:
	// the system's).
	CAFile string
	// CertFile and KeyFile are a client certificate (mutual TLS), optional.
	CertFile, KeyFile string
	// ServerName overrides the name checked in the server's certificate.
	ServerName string
}

// Admin configures the admin routes' bearer token.
type Admin struct {
	// TokenEnv names an environment variable holding the token; TokenFile a
	// file holding it. Exactly one is set.
	TokenEnv, TokenFile string
}

// Token reads the admin token. env is the environment to look in (nil: the
// process environment).
func (a *Admin) Token(env func(string) (string, bool)) (string, error) {
	var tok string
	if a.TokenEnv != "" {
		if env == nil {
			env = os.LookupEnv
		}
		t, ok := env(a.TokenEnv)
		if !ok {
			return "", fmt.Errorf("admin.token_env: environment variable %s is not set", a.TokenEnv)
		}
		tok = t
	} else {
		b, err := readSmallFile(a.TokenFile)
		if err != nil {
			return "", fmt.Errorf("admin.token_file: %w", err)
		}
		tok = strings.TrimRight(string(b), "\r\n")
	}
	if len(tok) < 16 {
		return "", fmt.Errorf("admin token must be at least 16 characters, got %d", len(tok))
	}
	return tok, nil
}

func readSmallFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return b, nil
}

// Headers selects the rate-limit response headers to send.
type Headers uint8

// The header families.
const (
	// HeadersXRateLimit: X-RateLimit-Limit, X-RateLimit-Remaining,
	// X-RateLimit-Reset (seconds until the limit is fully restored).
	HeadersXRateLimit Headers = 1 << iota
	// HeadersIETF: the IETF draft's RateLimit-Policy and RateLimit fields.
	HeadersIETF
	// HeadersRetryAfter: Retry-After in whole seconds on refusals.
	HeadersRetryAfter

	HeadersAll  = HeadersXRateLimit | HeadersIETF | HeadersRetryAfter
	HeadersNone = Headers(0)
)

var headerNames = []struct {
	name string
	h    Headers
}{{"x-ratelimit", HeadersXRateLimit}, {"ietf", HeadersIETF}, {"retry-after", HeadersRetryAfter}}

// Names lists the header families in h, such as [x-ratelimit retry-after].
func (h Headers) Names() []string {
	out := []string{}
	for _, n := range headerNames {
		if h&n.h != 0 {
			out = append(out, n.name)
		}
	}
	return out
}

// Policy is one named limit.
type Policy struct {
	Name string
	// Limiter is the name of the limiter and the second part of its keys:
	// the policy's name and its algorithm, such as "api.token_bucket", so
	// that changing a policy's algorithm never meets the old state.
	Limiter   string
	Algorithm sluice.Algorithm
	// Policy is the sluice policy, validated.
	Policy sluice.Policy
	// Limit is the limit, capacity or burst.
	Limit    int64
	FailMode sluice.FailMode
	Shadow   bool
	// Timeout bounds each decision (0: the valkey section's, or 50ms).
	Timeout time.Duration
	Headers Headers
	// Description is free text shown by GET /v1/policies.
	Description string
	// Envoy reports a policy generated from an envoyproxy/ratelimit
	// rate_limit; Domain is its domain.
	Envoy  bool
	Domain string
	// Line is where the policy is defined.
	Line int
}

// Window returns the period after which a fully used limit is fully
// restored: the window, or the time to refill the bucket.
func (p *Policy) Window() time.Duration {
	r, err := p.Policy.Rule()
	if err != nil {
		return 0
	}
	switch r.Algorithm {
	case sluice.AlgorithmTokenBucket:
		return time.Duration(math.Round(float64(r.Limit)/r.Rate)) * time.Microsecond
	case sluice.AlgorithmGCRA:
		return time.Duration(r.Limit) * r.Interval
	}
	return r.Window
}

// Domain is an Envoy rate-limit domain: a tree of descriptors.
type Domain struct {
	Name        string
	Descriptors []*Descriptor
	Line        int
}

// Descriptor is one node of a domain's tree: a key, optionally a value (a
// value ending in '*' matches by prefix; no value matches any value), and
// what applies to requests whose descriptor ends here.
type Descriptor struct {
	Key, Value string
	// Policy names the policy that applies, "" when none.
	Policy string
	// Unlimited descriptors are always allowed.
	Unlimited bool
	// Deny refuses every request (requests_per_unit: 0).
	Deny bool
	// Shadow: the limit is observed, never enforced (shadow_mode).
	Shadow bool
	// ShareThreshold: all values matching a wildcard value share one counter.
	ShareThreshold bool
	Children       []*Descriptor
	Line           int
}

// Entry is one key/value pair of a request's descriptor.
type Entry struct{ Key, Value string }

// Match finds the descriptor that applies to a request's entries, as
// envoyproxy/ratelimit does: at each level the exact key_value first, then a
// wildcard value by prefix, then the key alone; the node of the last entry
// applies, and a request deeper than the tree matches nothing. matched holds
// the values to count under, level by level (the wildcard pattern itself
// where share_threshold is set).
func (d *Domain) Match(entries []Entry) (node *Descriptor, matched []Entry) {
	level := d.Descriptors
	for i, e := range entries {
		next := find(level, e)
		if next == nil {
			return nil, nil
		}
		v := e.Value
		if next.ShareThreshold && strings.HasSuffix(next.Value, "*") {
			v = next.Value
		}
		matched = append(matched, Entry{Key: e.Key, Value: v})
		if i == len(entries)-1 {
			return next, matched
		}
		if len(next.Children) == 0 {
			return nil, nil
		}
		level = next.Children
	}
	return nil, nil
}

func find(level []*Descriptor, e Entry) *Descriptor {
	for _, c := range level {
		if c.Key == e.Key && c.Value == e.Value && c.Value != "" {
			return c
		}
	}
	for _, c := range level {
		if c.Key == e.Key && strings.HasSuffix(c.Value, "*") && strings.HasPrefix(e.Value, strings.TrimSuffix(c.Value, "*")) {
			return c
		}
	}
	for _, c := range level {
		if c.Key == e.Key && c.Value == "" {
			return c
		}
	}
	return nil
}

// Load reads and validates the configuration file name.
func Load(name string) (*Config, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return nil, fmt.Errorf("%s is a directory, want a YAML file", name)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, MaxFileSize)
	}
	return Parse(name, data)
}

// Parse validates data, the contents of the file named file (used in error
// messages). The error, when not nil, lists every problem found (up to 20),
// one per line, each as file:line:column: message.
func Parse(file string, data []byte) (*Config, error) {
	d := &decoder{file: file}
	root := d.parseDocument(data)
	if root == nil {
		return nil, d.err()
	}
	root = d.resolve(root)
	if root == nil {
		return nil, d.err()
	}
	c := &Config{Source: file, Prefix: sluice.DefaultPrefix}
	if root.Kind == yaml.MappingNode && hasKey(root, "domain") {
		f := d.mapping(root, "envoyproxy/ratelimit config", envoyDomainFields...)
		c.Domains = append(c.Domains, d.domain(c, root, f))
	} else {
		d.sluice(c, root)
	}
	if err := d.err(); err != nil {
		return nil, err
	}
	if len(c.Policies) == 0 && len(c.Domains) == 0 {
		d.errorf(root, "no policies and no domains: nothing to limit")
	}
	if err := d.err(); err != nil {
		return nil, err
	}
	return c, nil
}

func hasKey(m *yaml.Node, key string) bool {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return true
		}
	}
	return false
}

var topFields = []string{"prefix", "listen", "grpc_listen", "valkey", "admin", "policies", "domains"}

func (d *decoder) sluice(c *Config, root *yaml.Node) {
	f := d.mapping(root, "configuration", topFields...)
	if f == nil {
		return
	}
	if v, ok := f["prefix"]; ok {
		c.Prefix = d.str(v.val, "prefix")
		if c.Prefix == "" || strings.ContainsAny(c.Prefix, "{} \t\r\n") || len(c.Prefix) > 64 {
			d.errorf(v.val, "prefix must be 1 to 64 characters without braces or spaces, got %q", c.Prefix)
		}
	}
	if v, ok := f["listen"]; ok {
		c.Listen = d.address(v.val, "listen")
	}
	if v, ok := f["grpc_listen"]; ok {
		c.GRPCListen = d.address(v.val, "grpc_listen")
	}
	var defaultTimeout time.Duration
	if v, ok := f["valkey"]; ok {
		c.Valkey = d.valkey(v.val)
		if c.Valkey != nil {
			defaultTimeout = c.Valkey.Timeout
		}
	}
	if v, ok := f["admin"]; ok {
		c.Admin = d.admin(v.val)
	}
	if v, ok := f["policies"]; ok {
		for _, n := range d.sequence(v.val, "policies") {
			if p := d.policy(n, c, defaultTimeout); p != nil {
				c.Policies = append(c.Policies, p)
			}
		}
	}
	if v, ok := f["domains"]; ok {
		for _, n := range d.sequence(v.val, "domains") {
			df := d.mapping(n, "domain", envoyDomainFields...)
			if df == nil {
				continue
			}
			if dom := d.domain(c, n, df); dom != nil {
				c.Domains = append(c.Domains, dom)
			}
		}
	}
}

func (d *decoder) address(n *yaml.Node, what string) string {
	s := d.str(n, what)
	if s != "" && !strings.Contains(s, ":") {
		d.errorf(n, "%s must be host:port, got %q", what, s)
	}
	return s
}

var valkeyFields = []string{"addresses", "address", "username", "password_env", "password_file", "tls", "timeout", "connect_timeout"}

func (d *decoder) valkey(n *yaml.Node) *Valkey {
	f := d.mapping(n, "valkey", valkeyFields...)
	if f == nil {
		return nil
	}
	v := &Valkey{Timeout: sluice.DefaultTimeout, ConnectTimeout: DefaultConnectTimeout}
	if a, ok := f["address"]; ok {
		v.Addresses = append(v.Addresses, d.address(a.val, "valkey.address"))
	}
	if a, ok := f["addresses"]; ok {
		if _, both := f["address"]; both {
			d.errorf(a.key, "valkey: set address or addresses, not both")
		}
		for _, x := range d.sequence(a.val, "valkey.addresses") {
			v.Addresses = append(v.Addresses, d.address(x, "valkey.addresses item"))
		}
	}
	if x, ok := f["username"]; ok {
		v.Username = d.str(x.val, "valkey.username")
	}
	if x, ok := f["password_env"]; ok {
		v.PasswordEnv = d.str(x.val, "valkey.password_env")
	}
	if x, ok := f["password_file"]; ok {
		v.PasswordFile = d.str(x.val, "valkey.password_file")
		if v.PasswordEnv != "" {
			d.errorf(x.key, "valkey: set password_env or password_file, not both")
		}
	}
	if x, ok := f["tls"]; ok {
		v.TLS = d.tls(x.val)
	}
	if x, ok := f["timeout"]; ok {
		v.Timeout = d.duration(x.val, "valkey.timeout", time.Millisecond, time.Minute)
	}
	if x, ok := f["connect_timeout"]; ok {
		v.ConnectTimeout = d.duration(x.val, "valkey.connect_timeout", time.Millisecond, 5*time.Minute)
	}
	return v
}

func (d *decoder) tls(n *yaml.Node) *TLS {
	n2 := d.resolve(n)
	if n2 != nil && n2.Kind == yaml.ScalarNode && n2.ShortTag() == "!!bool" {
		if d.boolean(n2, "valkey.tls") {
			return &TLS{}
		}
		return nil
	}
	f := d.mapping(n, "valkey.tls", "ca_file", "cert_file", "key_file", "server_name")
	if f == nil {
		return nil
	}
	t := &TLS{}
	if x, ok := f["ca_file"]; ok {
		t.CAFile = d.str(x.val, "valkey.tls.ca_file")
	}
	if x, ok := f["cert_file"]; ok {
		t.CertFile = d.str(x.val, "valkey.tls.cert_file")
	}
	if x, ok := f["key_file"]; ok {
		t.KeyFile = d.str(x.val, "valkey.tls.key_file")
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		d.errorf(n, "valkey.tls: cert_file and key_file go together")
	}
	if x, ok := f["server_name"]; ok {
		t.ServerName = d.str(x.val, "valkey.tls.server_name")
	}
	return t
}

func (d *decoder) admin(n *yaml.Node) *Admin {
	f := d.mapping(n, "admin", "token_env", "token_file")
	if f == nil {
		return nil
	}
	a := &Admin{}
	if x, ok := f["token_env"]; ok {
		a.TokenEnv = d.str(x.val, "admin.token_env")
	}
	if x, ok := f["token_file"]; ok {
		a.TokenFile = d.str(x.val, "admin.token_file")
	}
	if (a.TokenEnv == "") == (a.TokenFile == "") {
		d.errorf(n, "admin: set exactly one of token_env and token_file (never the token itself)")
	}
	return a
}

func (d *decoder) duration(n *yaml.Node, what string, lo, hi time.Duration) time.Duration {
	s, ok := d.scalar(n, what)
	if !ok {
		return 0
	}
	v, err := ParseDuration(s)
	if err != nil {
		d.errorf(n, "%s: %v", what, err)
		return 0
	}
	if v < lo || v > hi {
		d.errorf(n, "%s must be between %v and %v, got %v", what, lo, hi, v)
		return 0
	}
	return v
}

var policyFields = []string{"name", "algorithm", "limit", "window", "burst", "rate", "count_rejected",
	"on_failure", "shadow", "headers", "timeout", "description"}

// fieldsFor lists the fields each algorithm uses.
var fieldsFor = map[sluice.Algorithm][]string{
	sluice.AlgorithmFixedWindow:   {"limit", "window"},
	sluice.AlgorithmSlidingWindow: {"limit", "window"},
	sluice.AlgorithmSlidingLog:    {"limit", "window", "count_rejected"},
	sluice.AlgorithmTokenBucket:   {"burst", "rate"},
	sluice.AlgorithmGCRA:          {"burst", "rate"},
}

func (d *decoder) policy(n *yaml.Node, c *Config, defaultTimeout time.Duration) *Policy {
	f := d.mapping(n, "policy", policyFields...)
	if f == nil {
		return nil
	}
	errsBefore := len(d.errs)
	p := &Policy{Line: n.Line, Headers: HeadersAll, Timeout: defaultTimeout}
	if x, ok := f["name"]; ok {
		p.Name = d.str(x.val, "policy name")
		if err := checkName(p.Name); err != nil {
			d.errorf(x.val, "policy name: %v", err)
		} else if c.Policy(p.Name) != nil {
			d.errorf(x.val, "policy name %q is already used at line %d", p.Name, c.Policy(p.Name).Line)
		}
	} else {
		d.errorf(n, "policy: name is missing")
	}
	x, ok := f["algorithm"]
	if !ok {
		d.errorf(n, "policy %q: algorithm is missing (fixed_window, sliding_log, sliding_window, token_bucket or gcra)", p.Name)
		return nil
	}
	alg, err := sluice.ParseAlgorithm(d.str(x.val, "algorithm"))
	if err != nil {
		d.errorf(x.val, "policy %q: %s", p.Name, strings.TrimPrefix(err.Error(), sluice.ErrInvalidPolicy.Error()+": "))
		return nil
	}
	p.Algorithm = alg
	for _, name := range []string{"limit", "window", "burst", "rate", "count_rejected"} {
		if x, ok := f[name]; ok && !contains(fieldsFor[alg], name) {
			d.errorf(x.key, "policy %q: %s is not used by %v (it takes %s)", p.Name, name, alg, strings.Join(fieldsFor[alg], ", "))
		}
	}
	for _, name := range fieldsFor[alg] {
		if _, ok := f[name]; !ok && name != "count_rejected" {
			d.errorf(n, "policy %q: %s needs %s", p.Name, alg, name)
		}
	}
	get := func(name string) *yaml.Node {
		if x, ok := f[name]; ok {
			return x.val
		}
		return nil
	}
	var limit int64
	var window time.Duration
	var rate float64
	var per time.Duration
	if x := get("limit"); x != nil {
		limit, _ = d.integer(x, "limit", 1, 1<<40)
	}
	if x := get("burst"); x != nil {
		limit, _ = d.integer(x, "burst", 1, 1<<40)
	}
	if x := get("window"); x != nil {
		window = d.duration(x, "window", sluice.MinWindow, 400*24*time.Hour)
	}
	if x := get("rate"); x != nil {
		if s, ok := d.scalar(x, "rate"); ok {
			var err error
			rate, per, err = ParseRate(s)
			if err != nil {
				d.errorf(x, "%v", err)
			}
		}
	}
	countRejected := false
	if x := get("count_rejected"); x != nil {
		countRejected = d.boolean(x, "count_rejected")
	}
	if x := get("on_failure"); x != nil {
		switch s := d.str(x, "on_failure"); s {
		case "allow", "open":
			p.FailMode = sluice.FailOpen
		case "deny", "closed":
			p.FailMode = sluice.FailClosed
		default:
			d.errorf(x, "on_failure must be allow or deny, got %q", s)
		}
	}
	if x := get("shadow"); x != nil {
		p.Shadow = d.boolean(x, "shadow")
	}
	if x := get("timeout"); x != nil {
		p.Timeout = d.duration(x, "timeout", time.Millisecond, time.Minute)
	}
	if x := get("description"); x != nil {
		p.Description = d.str(x, "description")
	}
	if x := get("headers"); x != nil {
		p.Headers = d.headers(x)
	}
	if len(d.errs) > errsBefore {
		return nil
	}
	switch alg {
	case sluice.AlgorithmFixedWindow:
		p.Policy = sluice.FixedWindow{Limit: limit, Window: window}
	case sluice.AlgorithmSlidingWindow:
		p.Policy = sluice.SlidingWindow{Limit: limit, Window: window}
	case sluice.AlgorithmSlidingLog:
		p.Policy = sluice.SlidingLog{Limit: limit, Window: window, CountRejected: countRejected}
	case sluice.AlgorithmTokenBucket:
		p.Policy = sluice.TokenBucket{Capacity: limit, Rate: rate, Per: per}
	case sluice.AlgorithmGCRA:
		p.Policy = sluice.GCRA{Rate: rate, Per: per, Burst: limit}
	}
	if _, err := p.Policy.Rule(); err != nil {
		d.errorf(n, "policy %q: %s", p.Name, strings.TrimPrefix(err.Error(), sluice.ErrInvalidPolicy.Error()+": "))
		return nil
	}
	p.Limit = limit
	p.Limiter = p.Name + "." + alg.String()
	return p
}

func (d *decoder) headers(n *yaml.Node) Headers {
	r := d.resolve(n)
	if r == nil {
		return 0
	}
	known := "x-ratelimit, ietf, retry-after, all or none"
	one := func(x *yaml.Node) Headers {
		s := d.str(x, "headers")
		switch s {
		case "all":
			return HeadersAll
		case "none":
			return HeadersNone
		}
		for _, h := range headerNames {
			if h.name == s {
				return h.h
			}
		}
		d.errorf(x, "headers: unknown %q (want %s)", s, known)
		return 0
	}
	if r.Kind == yaml.ScalarNode {
		return one(r)
	}
	var h Headers
	for _, x := range d.sequence(r, "headers") {
		h |= one(x)
	}
	return h
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checkName validates a policy name: 1 to 48 of [A-Za-z0-9_.-].
func checkName(name string) error {
	if name == "" || len(name) > maxPolicyName {
		return fmt.Errorf("must be 1 to %d characters, got %d", maxPolicyName, len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return fmt.Errorf("%q may hold only letters, digits, '_', '.' and '-'", name)
		}
	}
	return nil
}

// Envoy's format.

var envoyDomainFields = []string{"domain", "descriptors"}

var envoyDescriptorFields = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode",
	"detailed_metric", "value_to_metric", "share_threshold", "policy"}

var envoyUnits = map[string]time.Duration{
	"second": time.Second, "minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour,
	"week": 7 * 24 * time.Hour, "month": 30 * 24 * time.Hour, "year": 365 * 24 * time.Hour,
}

func (d *decoder) domain(c *Config, n *yaml.Node, f map[string]field) *Domain {
	if f == nil {
		return nil
	}
	dom := &Domain{Line: n.Line}
	if x, ok := f["domain"]; ok {
		dom.Name = d.str(x.val, "domain")
		if dom.Name == "" {
			d.errorf(x.val, "domain must not be empty")
		} else if prev := c.Domain(dom.Name); prev != nil {
			d.errorf(x.val, "domain %q is already defined at line %d", dom.Name, prev.Line)
		}
	} else {
		d.errorf(n, "domain is missing")
	}
	if x, ok := f["descriptors"]; ok {
		dom.Descriptors = d.descriptors(c, dom, x.val, nil)
	}
	return dom
}

func (d *decoder) descriptors(c *Config, dom *Domain, n *yaml.Node, path []string) []*Descriptor {
	var out []*Descriptor
	for _, item := range d.sequence(n, "descriptors") {
		f := d.mapping(item, "descriptor", envoyDescriptorFields...)
		if f == nil {
			continue
		}
		desc := &Descriptor{Line: item.Line}
		if x, ok := f["key"]; ok {
			desc.Key = d.str(x.val, "descriptor key")
			if desc.Key == "" {
				d.errorf(x.val, "descriptor key must not be empty")
			}
		} else {
			d.errorf(item, "descriptor: key is missing")
		}
		if x, ok := f["value"]; ok {
			desc.Value = d.str(x.val, "descriptor value")
		}
		for _, prev := range out {
			if prev.Key == desc.Key && prev.Value == desc.Value {
				d.errorf(item, "descriptor %s=%q is already defined at line %d", desc.Key, desc.Value, prev.Line)
			}
		}
		if x, ok := f["shadow_mode"]; ok {
			desc.Shadow = d.boolean(x.val, "shadow_mode")
		}
		if x, ok := f["share_threshold"]; ok {
			desc.ShareThreshold = d.boolean(x.val, "share_threshold")
			if desc.ShareThreshold && !strings.HasSuffix(desc.Value, "*") {
				d.errorf(x.key, "share_threshold applies only to a wildcard value ending in '*'")
			}
		}
		for _, ignored := range []string{"detailed_metric", "value_to_metric"} {
			if x, ok := f[ignored]; ok {
				d.boolean(x.val, ignored) // accepted for compatibility; metrics are per policy
			}
		}
		here := append(append([]string(nil), path...), desc.Key+"="+desc.Value)
		rl, hasRL := f["rate_limit"]
		if x, ok := f["policy"]; ok {
			desc.Policy = d.str(x.val, "policy")
			if hasRL {
				d.errorf(x.key, "descriptor: set policy or rate_limit, not both")
			} else if p := c.Policy(desc.Policy); p == nil || p.Envoy {
				d.errorf(x.val, "descriptor: unknown policy %q (define it under policies, before domains)", desc.Policy)
			}
		}
		if hasRL {
			d.rateLimit(c, dom, desc, rl.val, here)
		}
		if x, ok := f["descriptors"]; ok {
			desc.Children = d.descriptors(c, dom, x.val, here)
		}
		out = append(out, desc)
	}
	return out
}

func (d *decoder) rateLimit(c *Config, dom *Domain, desc *Descriptor, n *yaml.Node, path []string) {
	f := d.mapping(n, "rate_limit", "unit", "requests_per_unit", "unit_multiplier", "unlimited", "name", "replaces")
	if f == nil {
		return
	}
	if x, ok := f["replaces"]; ok {
		d.errorf(x.key, "rate_limit: replaces is not supported by sluice; remove it or express the limit as its own descriptor")
	}
	if x, ok := f["unlimited"]; ok && d.boolean(x.val, "unlimited") {
		desc.Unlimited = true
		for _, other := range []string{"unit", "requests_per_unit", "unit_multiplier"} {
			if y, ok := f[other]; ok {
				d.errorf(y.key, "rate_limit: %s makes no sense with unlimited: true", other)
			}
		}
		return
	}
	var unit time.Duration
	if x, ok := f["unit"]; ok {
		s := d.str(x.val, "unit")
		unit = envoyUnits[strings.ToLower(s)]
		if unit == 0 {
			d.errorf(x.val, "rate_limit: unknown unit %q (want second, minute, hour, day, week, month or year)", s)
		}
	} else {
		d.errorf(n, "rate_limit: unit is missing")
	}
	var rpu int64
	if x, ok := f["requests_per_unit"]; ok {
		rpu, _ = d.integer(x.val, "requests_per_unit", 0, 1<<32-1)
	} else {
		d.errorf(n, "rate_limit: requests_per_unit is missing")
	}
	mult := int64(1)
	if x, ok := f["unit_multiplier"]; ok {
		mult, _ = d.integer(x.val, "unit_multiplier", 1, 1<<20)
	}
	label := ""
	if x, ok := f["name"]; ok {
		label = d.str(x.val, "rate_limit name")
	}
	if unit == 0 || mult == 0 {
		return
	}
	if rpu == 0 {
		desc.Deny = true
		return
	}
	window := unit * time.Duration(mult)
	p := &Policy{
		Algorithm: sluice.AlgorithmFixedWindow,
		Policy:    sluice.FixedWindow{Limit: rpu, Window: window},
		Limit:     rpu,
		Shadow:    desc.Shadow,
		Headers:   HeadersAll,
		Envoy:     true,
		Domain:    dom.Name,
		Line:      n.Line,
	}
	if c.Valkey != nil {
		p.Timeout = c.Valkey.Timeout
	}
	if _, err := p.Policy.Rule(); err != nil {
		d.errorf(n, "rate_limit: %s", strings.TrimPrefix(err.Error(), sluice.ErrInvalidPolicy.Error()+": "))
		return
	}
	p.Name = envoyName(c, dom.Name, path, label)
	p.Description = fmt.Sprintf("envoy domain %s: %s", dom.Name, strings.Join(path, " / "))
	p.Limiter = p.Name + "." + p.Algorithm.String()
	desc.Policy = p.Name
	c.Policies = append(c.Policies, p)
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
	clean := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-' {
				return r
			}
			return '_'
		}, s)
	}
	name := clean(b.String())
	if label != "" && checkName(label) == nil && c.Policy(label) == nil {
		name = label
	}
	if checkName(name) == nil && c.Policy(name) == nil {
		return name
	}
	sum := sha256.Sum256([]byte(domain + "\x00" + strings.Join(path, "\x00")))
	return "envoy-" + hex.EncodeToString(sum[:10])
}
