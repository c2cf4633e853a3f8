// Package clientip finds the address of the client behind an HTTP request,
// for keys that limit anonymous traffic by address.
//
// The address is the TCP peer's (http.Request.RemoteAddr) unless the peer is
// a trusted proxy. Only then is a forwarding header read, from the right:
// each proxy appends the address it received the request from, so the
// right-most entries were written by proxies you trust, and the first entry
// from the right that is not a trusted proxy is the client. Everything left
// of it was written by the client and is ignored.
//
// Security: X-Forwarded-For, Forwarded, X-Real-IP and CF-Connecting-IP are
// plain request headers that any client can send. A Resolver reads them only
// from peers you configure as trusted ([Config.TrustedProxies] or
// [Config.TrustedHops]), so a client that connects directly cannot choose its
// key. Configure exactly the proxies in front of your service, and read the
// header those proxies maintain: a header they pass through untouched is
// attacker-controlled.
//
// Addresses are normalised: an IPv4-mapped IPv6 address (::ffff:192.0.2.1)
// becomes IPv4, and IPv6 zones are dropped. For keys, IPv6 addresses are
// grouped by prefix (/64 by default), since one subscriber usually holds a
// whole /64 and could otherwise take a fresh address, and a fresh budget, for
// every request.
//
// A [Config] configures a Resolver: it is data (what a configuration file
// or a flag set fills in), not the functional options (Option) with which
// package sluice and the stores configure what their constructors build.
package clientip

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Headers a Resolver can read, as used in Config.Header.
const (
	// XForwardedFor is the de facto standard list of hops, one address per
	// proxy, across all header lines: "client, proxy1, proxy2".
	XForwardedFor = "X-Forwarded-For"
	// Forwarded is the RFC 7239 header: for= parameters, one element per
	// hop.
	Forwarded = "Forwarded"
	// XRealIP is a single-address header set by nginx's realip setups.
	XRealIP = "X-Real-IP"
	// CFConnectingIP is the single-address header set by Cloudflare.
	CFConnectingIP = "CF-Connecting-IP"
)

// Unknown is the key of requests whose peer address cannot be parsed (such
// as requests over a Unix socket). It never equals the key of an address.
const Unknown = "unknown"

// Config says which peers are trusted proxies and which header they set.
// Its zero value trusts no proxy: the client is always the TCP peer.
type Config struct {
	// TrustedProxies lists the networks of the proxies in front of the
	// service (load balancers, CDN edges). A forwarding header is read only
	// when the peer is in one of them, and hops inside them are skipped
	// when looking for the client. Default none. See ParsePrefixes and
	// PrivateNetworks.
	TrustedProxies []netip.Prefix

	// TrustedHops, instead of TrustedProxies, says how many proxies are in
	// front of the service, the peer being the nearest: each appended one
	// address, so the client is the TrustedHops-th address of the header
	// counted from the right (or the left-most, when there are fewer). Use
	// it when the proxies' addresses are not known in advance. It trusts
	// the peer without checking it, so it is only safe when nothing can
	// reach the service except through all the proxies. Default 0 (no
	// proxy).
	TrustedHops int

	// Header is the header the trusted proxies set: XForwardedFor (the
	// default), Forwarded, or a single-address header such as XRealIP or
	// CFConnectingIP (any name is accepted; it must hold exactly one
	// address). Only one header is read: a header your proxies do not
	// overwrite or append to is attacker-controlled. A single-address
	// header requires TrustedProxies.
	Header string

	// IPv6Prefix is the prefix length that groups IPv6 addresses in keys
	// (default 64: one subscriber, one key). 128 keys each address apart;
	// shorter prefixes (56, 48) catch clients that rotate through a larger
	// allocation, at the price of grouping more neighbours.
	IPv6Prefix int

	// IPv4Prefix is the prefix length that groups IPv4 addresses in keys
	// (default 32: each address apart).
	IPv4Prefix int
}

// A Resolver finds the client address of requests. It is safe for
// concurrent use.
type Resolver struct {
	trusted []netip.Prefix
	hops    int
	header  string
	kind    headerKind
	v6, v4  int
}

type headerKind uint8

const (
	kindXFF headerKind = iota
	kindForwarded
	kindSingle
)

// New returns a Resolver for cfg. It fails when cfg is contradictory: both
// TrustedProxies and TrustedHops, a negative hop count, a single-address
// header without TrustedProxies, or prefix lengths out of range.
func New(cfg Config) (*Resolver, error) {
	if err := checkHops(cfg); err != nil {
		return nil, err
	}
	r := &Resolver{hops: cfg.TrustedHops, v6: orDefault(cfg.IPv6Prefix, 64), v4: orDefault(cfg.IPv4Prefix, 32)}
	trusted, err := normTrusted(cfg.TrustedProxies)
	if err != nil {
		return nil, err
	}
	r.trusted = trusted
	if err := r.setHeader(cfg.Header); err != nil {
		return nil, err
	}
	if err := r.checkPrefixLengths(); err != nil {
		return nil, err
	}
	return r, nil
}

// checkHops refuses a negative TrustedHops, and TrustedHops beside
// TrustedProxies.
func checkHops(cfg Config) error {
	if cfg.TrustedHops < 0 {
		return fmt.Errorf("clientip: TrustedHops must not be negative, got %d", cfg.TrustedHops)
	}
	if cfg.TrustedHops > 0 && len(cfg.TrustedProxies) > 0 {
		return errors.New("clientip: set TrustedProxies or TrustedHops, not both")
	}
	return nil
}

// orDefault returns v, or def when v is zero.
func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// normTrusted returns the trusted prefixes normalised (see normPrefix),
// refusing an invalid one.
func normTrusted(prefixes []netip.Prefix) ([]netip.Prefix, error) {
	var trusted []netip.Prefix
	for _, p := range prefixes {
		if !p.IsValid() {
			return nil, fmt.Errorf("clientip: invalid trusted prefix %v", p)
		}
		trusted = append(trusted, normPrefix(p))
	}
	return trusted, nil
}

// setHeader sets the header the client address is read from, and how it
// is read; a header holding a single address needs trusted proxies, which
// are set first.
func (r *Resolver) setHeader(header string) error {
	r.header = http.CanonicalHeaderKey(strings.TrimSpace(header))
	switch r.header {
	case "", XForwardedFor:
		r.header, r.kind = XForwardedFor, kindXFF
	case Forwarded:
		r.kind = kindForwarded
	default:
		r.kind = kindSingle
		if len(r.trusted) == 0 {
			return fmt.Errorf("clientip: header %s holds one address and needs TrustedProxies", r.header)
		}
	}
	return nil
}

// checkPrefixLengths refuses grouping prefix lengths out of range.
func (r *Resolver) checkPrefixLengths() error {
	if err := checkPrefixLen("IPv6Prefix", r.v6, 128); err != nil {
		return err
	}
	return checkPrefixLen("IPv4Prefix", r.v4, 32)
}

// checkPrefixLen refuses bits, the value of the option name, outside 1..max.
func checkPrefixLen(name string, bits, max int) error {
	if bits < 1 || bits > max {
		return fmt.Errorf("clientip: %s must be in 1..%d, got %d", name, max, bits)
	}
	return nil
}

// MustNew is New that panics on error, for package-level variables built
// from constant configurations.
func MustNew(cfg Config) *Resolver {
	r, err := New(cfg)
	if err != nil {
		panic(err)
	}
	return r
}

// normPrefix turns an IPv4-mapped prefix (::ffff:10.0.0.0/104) into its IPv4
// form and masks the host bits.
func normPrefix(p netip.Prefix) netip.Prefix {
	a := p.Addr().WithZone("")
	bits := p.Bits()
	if a.Is4In6() && bits >= 96 {
		a = a.Unmap()
		bits -= 96
	}
	return netip.PrefixFrom(a, bits).Masked()
}

// Addr returns the client address of req, normalised (IPv4-mapped becomes
// IPv4, no zone). ok is false when the peer address cannot be parsed, such
// as over a Unix socket; headers are then not read.
func (r *Resolver) Addr(req *http.Request) (addr netip.Addr, ok bool) {
	peer, ok := ParseAddr(req.RemoteAddr)
	if !ok {
		return netip.Addr{}, false
	}
	switch {
	case r.hops > 0:
		return r.byHops(req, peer), true
	case len(r.trusted) > 0 && r.isTrusted(peer):
		return r.byTrust(req, peer), true
	}
	return peer, true
}

// Key returns the key of req's client: its address, grouped by prefix
// length ("192.0.2.7", "2001:db8:1:2::/64"), or Unknown when Addr fails.
// It is never empty.
func (r *Resolver) Key(req *http.Request) string {
	a, ok := r.Addr(req)
	if !ok {
		return Unknown
	}
	return r.KeyOf(a)
}

// KeyOf returns the key of address a, grouped as Key groups it.
func (r *Resolver) KeyOf(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	if !a.IsValid() {
		return Unknown
	}
	bits := r.v4
	if a.Is6() {
		bits = r.v6
	}
	if bits == a.BitLen() {
		return a.String()
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return Unknown
	}
	return p.String()
}

func (r *Resolver) isTrusted(a netip.Addr) bool {
	for _, p := range r.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// maxHops bounds the entries read from a header, so a request with a huge
// header costs bounded work. Only the right-most entries matter.
const maxHops = 64

// chain returns the hops of the configured header, left to right, at most
// maxHops of the right-most ones. An entry that is not an address is the
// zero Addr.
func (r *Resolver) chain(req *http.Request) []netip.Addr {
	lines := req.Header.Values(r.header)
	if len(lines) == 0 {
		return nil
	}
	switch r.kind {
	case kindXFF:
		return parseXFF(lines, maxHops)
	case kindForwarded:
		return parseForwarded(lines, maxHops)
	}
	return singleHop(lines)
}

// parseXFF returns the entries of the X-Forwarded-For lines, left to
// right, at most max of the right-most ones. All header lines form one
// list (RFC 9110, section 5.3).
func parseXFF(lines []string, max int) []netip.Addr {
	var hops []netip.Addr
	for i := len(lines) - 1; i >= 0 && len(hops) < max; i-- {
		hops = appendXFFLine(hops, lines[i], max)
	}
	reverse(hops)
	return hops
}

// appendXFFLine appends the entries of one X-Forwarded-For line to hops,
// right to left, until hops holds max.
func appendXFFLine(hops []netip.Addr, line string, max int) []netip.Addr {
	for len(hops) < max {
		j := strings.LastIndexByte(line, ',')
		// Empty list elements are ignored (RFC 9110, section 5.6.1).
		if entry := strings.TrimSpace(line[j+1:]); entry != "" {
			a, _ := ParseAddr(entry)
			hops = append(hops, a)
		}
		if j < 0 {
			break
		}
		line = line[:j]
	}
	return hops
}

// singleHop returns the hop of a single-address header: exactly one line
// holding one address, or nothing usable (the zero Addr).
func singleHop(lines []string) []netip.Addr {
	if len(lines) != 1 || strings.Contains(lines[0], ",") {
		return []netip.Addr{{}}
	}
	a, _ := ParseAddr(lines[0])
	return []netip.Addr{a}
}

func reverse(s []netip.Addr) {
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
}

// byTrust walks the chain from the right, past trusted proxies, to the
// first untrusted address. peer is trusted. An entry that is not an address
// stops the walk at the last trusted hop: that proxy is the nearest client
// we know of, and nothing left of the broken entry can be believed.
func (r *Resolver) byTrust(req *http.Request, peer netip.Addr) netip.Addr {
	last := peer
	hops := r.chain(req)
	for i := len(hops) - 1; i >= 0; i-- {
		a := hops[i]
		if !a.IsValid() {
			return last
		}
		if !r.isTrusted(a) {
			return a
		}
		last = a
	}
	// Every hop is a trusted proxy: the request came from one of them.
	return last
}

// byHops returns the address r.hops entries from the right of header +
// peer. When the chain is shorter (the request bypassed some proxies) the
// left-most entry is the client; a malformed entry on the way stops at the
// hop to its right.
func (r *Resolver) byHops(req *http.Request, peer netip.Addr) netip.Addr {
	hops := r.chain(req)
	last := peer
	for n, i := 0, len(hops)-1; n < r.hops && i >= 0; n, i = n+1, i-1 {
		a := hops[i]
		if !a.IsValid() {
			return last
		}
		last = a
	}
	return last
}

// ParseAddr parses one address as found in RemoteAddr or a forwarding
// header: "192.0.2.1", "192.0.2.1:8080", "2001:db8::1", "[2001:db8::1]",
// "[2001:db8::1]:443", with surrounding space and an optional zone. The
// result is normalised: IPv4-mapped IPv6 becomes IPv4 and the zone is
// dropped. ok is false for anything else, including "unknown" and the
// unspecified address.
func ParseAddr(s string) (addr netip.Addr, ok bool) {
	s = strings.TrimSpace(s)
	if s == "" || len(s) > 100 {
		return netip.Addr{}, false
	}
	a, ok := parseAddrForm(s)
	if !ok {
		return netip.Addr{}, false
	}
	a = a.WithZone("").Unmap()
	if a.IsUnspecified() {
		return netip.Addr{}, false
	}
	return a, true
}

// parseAddrForm parses s as an address, a bracketed IPv6 address or an
// address with a port.
func parseAddrForm(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a, true
	}
	host, ok := hostOf(s)
	if !ok {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	return a, err == nil
}

// hostOf returns the host of "[host]" or of "host:port".
func hostOf(s string) (string, bool) {
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		return s[1 : len(s)-1], true
	}
	if h, _, err := net.SplitHostPort(s); err == nil {
		return h, true
	}
	return "", false
}

// ParsePrefixes parses trusted proxy networks: CIDRs ("10.0.0.0/8",
// "2001:db8::/32") or single addresses ("192.0.2.10", a /32 or /128).
func ParsePrefixes(ss ...string) ([]netip.Prefix, error) {
	var ps []netip.Prefix
	for _, s := range ss {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		p, err := parsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("clientip: %w", err)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// parsePrefix parses one network of ParsePrefixes: a CIDR, normalised, or
// a single address as a /32 or /128.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		return normPrefix(p), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.WithZone("").Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// PrivateNetworks returns the loopback, private (RFC 1918, RFC 4193) and
// link-local networks: a convenient TrustedProxies when every proxy runs in
// your own private network and clients never connect from it directly.
func PrivateNetworks() []netip.Prefix {
	ps, _ := ParsePrefixes(
		"127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16",
		"::1/128", "fc00::/7", "fe80::/10",
	)
	return ps
}
