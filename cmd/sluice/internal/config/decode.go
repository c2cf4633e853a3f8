package config

import (
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"go.yaml.in/yaml/v3"
)

// Decoding of the server sections of sluice's own format: listen addresses,
// valkey, tls and admin.

func (d *decoder) address(n *yaml.Node, what string) string {
	s := d.str(n, what)
	if s != "" && !strings.Contains(s, ":") {
		d.errorf(n, "%s must be host:port, got %q", what, s)
	}
	return s
}

func (d *decoder) valkey(n *yaml.Node) *Valkey {
	f := d.fields(n, "valkey", valkeySection)
	if f == nil {
		return nil
	}
	v := &Valkey{Timeout: sluice.DefaultTimeout, ConnectTimeout: DefaultConnectTimeout}
	v.Addresses = d.valkeyAddresses(f)
	v.Username, v.PasswordEnv, v.PasswordFile = d.credentials(f, "valkey")
	decodeFields(d, f, v, valkeyDecoders)
	if x, ok := f["sentinel"]; ok {
		d.valkeySentinel(x, v)
	}
	return v
}

// valkeyDecoders decode valkey's tls and timeouts.
var valkeyDecoders = []fieldDecoder[*Valkey]{
	{"tls", func(d *decoder, v *Valkey, n *yaml.Node) { v.TLS = d.tls(n) }},
	{"timeout", func(d *decoder, v *Valkey, n *yaml.Node) {
		v.Timeout = d.durationField(n, "valkey.timeout", valkeySection.Field("timeout"))
	}},
	{"connect_timeout", func(d *decoder, v *Valkey, n *yaml.Node) {
		v.ConnectTimeout = d.durationField(n, "valkey.connect_timeout", valkeySection.Field("connect_timeout"))
	}},
}

// valkeySentinel decodes valkey.sentinel into v, which then names no
// addresses of its own.
func (d *decoder) valkeySentinel(x field, v *Valkey) {
	v.Sentinel = d.sentinel(x.val)
	if len(v.Addresses) > 0 {
		d.errorf(x.key, "valkey: set address(es) or sentinel, not both (with sentinel, the Sentinels name the master)")
	}
}

func (d *decoder) sentinel(n *yaml.Node) *Sentinel {
	f := d.fields(n, "valkey.sentinel", sentinelSection)
	if f == nil {
		return nil
	}
	s := &Sentinel{}
	s.MasterSet = d.optString(f, "master_set", "valkey.sentinel.master_set")
	if s.MasterSet == "" {
		d.errorf(n, "valkey.sentinel: master_set is required (the name the Sentinels monitor, such as mymaster)")
	}
	if x, ok := f["addresses"]; ok {
		s.Addresses = d.addresses(x.val, "valkey.sentinel.addresses")
	}
	if len(s.Addresses) == 0 {
		d.errorf(n, "valkey.sentinel: addresses must list at least one Sentinel (host:port)")
	}
	s.Username, s.PasswordEnv, s.PasswordFile = d.credentials(f, "valkey.sentinel")
	return s
}

// valkeyAddresses decodes valkey.address or valkey.addresses, not both.
func (d *decoder) valkeyAddresses(f map[string]field) []string {
	var out []string
	if a, ok := f["address"]; ok {
		out = append(out, d.address(a.val, "valkey.address"))
	}
	if a, ok := f["addresses"]; ok {
		if _, both := f["address"]; both {
			d.errorf(a.key, "valkey: set address or addresses, not both")
		}
		out = append(out, d.addresses(a.val, "valkey.addresses")...)
	}
	return out
}

// addresses decodes the list what of host:port addresses.
func (d *decoder) addresses(n *yaml.Node, what string) []string {
	var out []string
	for _, x := range d.sequence(n, what) {
		out = append(out, d.address(x, what+" item"))
	}
	return out
}

// credentials decodes the username, password_env and password_file of the
// section at path (valkey or valkey.sentinel); a password comes from the
// environment or a file, not both.
func (d *decoder) credentials(f map[string]field, path string) (username, passwordEnv, passwordFile string) {
	username = d.optString(f, "username", path+".username")
	passwordEnv = d.optString(f, "password_env", path+".password_env")
	if x, ok := f["password_file"]; ok {
		passwordFile = d.str(x.val, path+".password_file")
		if passwordEnv != "" {
			d.errorf(x.key, "%s: set password_env or password_file, not both", path)
		}
	}
	return username, passwordEnv, passwordFile
}

func (d *decoder) tls(n *yaml.Node) *TLS {
	if n2 := d.resolve(n); isBool(n2) {
		return d.tlsSwitch(n2)
	}
	f := d.fields(n, "valkey.tls", tlsSection)
	if f == nil {
		return nil
	}
	t := &TLS{}
	t.CAFile = d.optString(f, "ca_file", "valkey.tls.ca_file")
	t.CertFile = d.optString(f, "cert_file", "valkey.tls.cert_file")
	t.KeyFile = d.optString(f, "key_file", "valkey.tls.key_file")
	if (t.CertFile == "") != (t.KeyFile == "") {
		d.errorf(n, "valkey.tls: cert_file and key_file go together")
	}
	t.ServerName = d.optString(f, "server_name", "valkey.tls.server_name")
	return t
}

// isBool reports whether n is a boolean scalar.
func isBool(n *yaml.Node) bool {
	return n != nil && n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool"
}

// tlsSwitch decodes "tls: true" (TLS with the system's roots) or "tls:
// false" (none).
func (d *decoder) tlsSwitch(n *yaml.Node) *TLS {
	if d.boolean(n, "valkey.tls") {
		return &TLS{}
	}
	return nil
}

func (d *decoder) admin(n *yaml.Node) *Admin {
	f := d.fields(n, "admin", adminSection)
	if f == nil {
		return nil
	}
	a := &Admin{}
	a.TokenEnv = d.optString(f, "token_env", "admin.token_env")
	a.TokenFile = d.optString(f, "token_file", "admin.token_file")
	if (a.TokenEnv == "") == (a.TokenFile == "") {
		d.errorf(n, "admin: set exactly one of token_env and token_file (never the token itself)")
	}
	return a
}

// fields returns the fields of mapping node n, which the table's section
// sec describes (see mapping).
func (d *decoder) fields(n *yaml.Node, what string, sec *Section) map[string]field {
	return d.mapping(n, what, sec.names()...)
}

// durationField decodes a duration within the row f's bounds.
func (d *decoder) durationField(n *yaml.Node, what string, f *Field) time.Duration {
	return d.duration(n, what, f.MinDur, f.MaxDur)
}

// intField decodes a whole number within the row f's bounds.
func (d *decoder) intField(n *yaml.Node, what string, f *Field) (int64, bool) {
	return d.integer(n, what, f.Min, f.Max)
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

// fieldDecoder decodes the field name of a section into dst.
type fieldDecoder[T any] struct {
	name   string
	decode func(d *decoder, dst T, n *yaml.Node)
}

// decodeFields runs, in order, the decoder of each field of decoders that
// f holds, on the field's value.
func decodeFields[T any](d *decoder, f map[string]field, dst T, decoders []fieldDecoder[T]) {
	for _, s := range decoders {
		if v, ok := f[s.name]; ok {
			s.decode(d, dst, v.val)
		}
	}
}
