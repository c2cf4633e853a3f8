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
	"fmt"
	"io"
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

// maxPolicyName is the longest policy name: the limiter's name is the
// policy's and its algorithm's (name.sliding_window), which must stay
// within sluice.MaxNameLength.
const maxPolicyName = sluice.MaxNameLength - len(".sliding_window")

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
	// ForwardAuth is nil when the forward-auth endpoints are off.
	ForwardAuth *ForwardAuth
	// MaxWaiting bounds the requests waiting for admission at once (a
	// policy's wait), MaxWaitingPerKey those waiting for one key of one
	// policy; 0 (a configuration not of sluice's format) for the defaults.
	MaxWaiting, MaxWaitingPerKey int
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
	data, err := readAtMost(f, name)
	if err != nil {
		return nil, err
	}
	return Parse(name, data)
}

// readAtMost reads all of r, the file name, refusing more than
// MaxFileSize bytes.
func readAtMost(r io.Reader, name string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, MaxFileSize)
	}
	return data, nil
}

// Parse validates data, the contents of the file named file (used in error
// messages). The error, when not nil, lists every problem found (up to 20),
// one per line, each as file:line:column: message.
func Parse(file string, data []byte) (*Config, error) {
	d := &decoder{file: file}
	root := d.root(data)
	if root == nil {
		return nil, d.err()
	}
	c := &Config{Source: file, Prefix: sluice.DefaultPrefix}
	d.decodeRoot(c, root)
	if err := d.err(); err != nil {
		return nil, err
	}
	if len(c.Policies) == 0 && len(c.Domains) == 0 {
		d.errorf(root, "no policies and no domains: nothing to limit")
		return nil, d.err()
	}
	return c, nil
}

// root is the root node of the one YAML document data holds, aliases
// followed; nil when there is none (the errors say why).
func (d *decoder) root(data []byte) *yaml.Node {
	root := d.parseDocument(data)
	if root == nil {
		return nil
	}
	return d.resolve(root)
}

// decodeRoot decodes the file's root into c: one domain of
// envoyproxy/ratelimit's format (a top-level domain key), else sluice's
// own format.
func (d *decoder) decodeRoot(c *Config, root *yaml.Node) {
	if root.Kind == yaml.MappingNode && hasKey(root, "domain") {
		f := d.fields(root, "envoyproxy/ratelimit config", domainSection)
		c.Domains = append(c.Domains, d.domain(c, root, f, true))
		return
	}
	d.sluice(c, root)
}

func hasKey(m *yaml.Node, key string) bool {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return true
		}
	}
	return false
}

// sluice decodes a configuration file of sluice's own format into c: its
// top-level sections, in the order a later one may refer to an earlier one
// (policies take valkey's timeout, domains and routes name policies).
func (d *decoder) sluice(c *Config, root *yaml.Node) {
	f := d.fields(root, "configuration", topSection)
	if f == nil {
		return
	}
	decodeFields(d, f, c, topDecoders)
	d.waitBounds(f, c)
}

// topDecoders decode the top-level sections of sluice's format, in the
// order a later one may refer to an earlier one (policies take valkey's
// timeout, domains and routes name policies).
var topDecoders = []fieldDecoder[*Config]{
	{"prefix", func(d *decoder, c *Config, n *yaml.Node) { c.Prefix = d.prefix(n) }},
	{"listen", func(d *decoder, c *Config, n *yaml.Node) { c.Listen = d.address(n, "listen") }},
	{"grpc_listen", func(d *decoder, c *Config, n *yaml.Node) { c.GRPCListen = d.address(n, "grpc_listen") }},
	{"valkey", func(d *decoder, c *Config, n *yaml.Node) { c.Valkey = d.valkey(n) }},
	{"admin", func(d *decoder, c *Config, n *yaml.Node) { c.Admin = d.admin(n) }},
	{"policies", func(d *decoder, c *Config, n *yaml.Node) { d.policies(c, n, c.valkeyTimeout()) }},
	{"domains", func(d *decoder, c *Config, n *yaml.Node) { d.domains(c, n) }},
	{"forward_auth", func(d *decoder, c *Config, n *yaml.Node) { c.ForwardAuth = d.forwardAuth(n, c) }},
}

// valkeyTimeout is the valkey section's timeout, the policies' default;
// 0 without the section.
func (c *Config) valkeyTimeout() time.Duration {
	if c.Valkey == nil {
		return 0
	}
	return c.Valkey.Timeout
}

// prefix decodes the key prefix: 1 to its row's Max characters, without
// braces or spaces.
func (d *decoder) prefix(n *yaml.Node) string {
	prefix := d.str(n, "prefix")
	max := topSection.Field("prefix").Max
	if prefix == "" || strings.ContainsAny(prefix, "{} \t\r\n") || int64(len(prefix)) > max {
		d.errorf(n, "prefix must be 1 to %d characters without braces or spaces, got %q", max, prefix)
	}
	return prefix
}

// policies decodes the policies section into c, each policy's timeout
// defaulting to defaultTimeout.
func (d *decoder) policies(c *Config, n *yaml.Node, defaultTimeout time.Duration) {
	for _, pn := range d.sequence(n, "policies") {
		if p := d.policy(pn, c, defaultTimeout); p != nil {
			c.Policies = append(c.Policies, p)
		}
	}
}

// domains decodes the domains section (Envoy domains written in sluice's
// format) into c.
func (d *decoder) domains(c *Config, n *yaml.Node) {
	for _, dn := range d.sequence(n, "domains") {
		df := d.fields(dn, "domain", domainSection)
		if df == nil {
			continue
		}
		if dom := d.domain(c, dn, df, false); dom != nil {
			c.Domains = append(c.Domains, dom)
		}
	}
}
