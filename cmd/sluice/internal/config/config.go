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
		f := d.fields(root, "envoyproxy/ratelimit config", domainSection)
		c.Domains = append(c.Domains, d.domain(c, root, f, true))
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

// sluice decodes a configuration file of sluice's own format into c: its
// top-level sections, in the order a later one may refer to an earlier one
// (policies take valkey's timeout, domains and routes name policies).
func (d *decoder) sluice(c *Config, root *yaml.Node) {
	f := d.fields(root, "configuration", topSection)
	if f == nil {
		return
	}
	if v, ok := f["prefix"]; ok {
		c.Prefix = d.prefix(v.val)
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
		d.policies(c, v.val, defaultTimeout)
	}
	if v, ok := f["domains"]; ok {
		d.domains(c, v.val)
	}
	if v, ok := f["forward_auth"]; ok {
		c.ForwardAuth = d.forwardAuth(v.val, c)
	}
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
