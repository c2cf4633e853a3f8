package config

import (
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/driver"
	"go.yaml.in/yaml/v3"
)

// The forward_auth section: route rules for reverse proxies that ask
// sluice serve before passing a request on (nginx auth_request, Traefik
// forwardAuth, Caddy forward_auth).

// ForwardAuth configures GET /v1/forward-auth and /v1/forward-auth/nginx.
type ForwardAuth struct {
	// TrustedProxies are the networks of the proxies that call the
	// endpoint. Only from them are the original request's method, URI,
	// host, client address and claims read from headers; a request from any
	// other peer is judged as itself, keyed by its own address.
	TrustedProxies []netip.Prefix
	// ClientIPHeader is the header the proxies put the client's address in
	// (default X-Forwarded-For; or Forwarded, X-Real-IP, ...).
	ClientIPHeader string
	// PathCaseSensitive (path_case: sensitive) compares paths as written;
	// by default (path_case: insensitive) /LOGIN is matched as /login,
	// since many backends serve it so.
	PathCaseSensitive bool
	// Unmatched says what happens to a request no route applies to.
	Unmatched Unmatched
	// Routes are tried in order; the first that applies decides.
	Routes []*Route
}

// Unmatched is the answer to a request that no route applies to.
type Unmatched uint8

const (
	// UnmatchedAllow lets it through without a limit (the default).
	UnmatchedAllow Unmatched = iota
	// UnmatchedDeny refuses it.
	UnmatchedDeny
)

// Route is one rule of forward_auth.routes. It applies to a request when
// every condition set holds and each of its limits finds a key.
type Route struct {
	// Name identifies the route in logs (default "route N", N from 1).
	Name string
	// PathPrefix matches the normalised path (see CleanPath and MatchPath)
	// segment by segment: "/api" (or "/api/") matches /api and /api/x, not
	// /apix. "" and "/" match every path. Lower-cased at load unless
	// path_case is sensitive.
	PathPrefix string
	// Methods, upper case; empty matches every method.
	Methods []string
	// Host matches the host without port, case-insensitively; "*.example.com"
	// matches any subdomain. "" matches every host.
	Host   string
	Limits []*RouteLimit
	Line   int
}

// RouteLimit is one limit of a route: a policy and where its key comes from.
type RouteLimit struct {
	Policy string
	// Keys are tried in order and the first present is the request's key
	// (key: [a, b] or key: {first: [a, b]}); with All (key: {all: [a, b]})
	// each present is counted, and the request is refused when any is over
	// the limit. Either way the limit finds no key when none is present.
	Keys []KeySource
	All  bool
	Line int
}

// KeySource is where a route limit's key comes from.
type KeySource struct {
	Kind KeyKind
	// Name is the header's canonical name (KeyHeader, KeyClaim).
	Name string
}

// KeyKind is the kind of a KeySource.
type KeyKind uint8

const (
	// KeyClientIP: the client's address (behind trusted proxies), IPv6 by /64.
	KeyClientIP KeyKind = iota
	// KeyHeader: a header of the original request, hashed. Any client can
	// send any value.
	KeyHeader
	// KeyClaim: a header a trusted proxy sets after authenticating the
	// client (a JWT claim, a user id), hashed; ignored from other peers.
	KeyClaim
)

// String returns the source as written in the configuration.
func (k KeySource) String() string {
	switch k.Kind {
	case KeyHeader:
		return "header:" + k.Name
	case KeyClaim:
		return "claim:" + k.Name
	}
	return "client_ip"
}

// Matches reports whether the route's conditions hold for a request with
// this method, normalised path and host (port allowed).
func (r *Route) Matches(method, cleanPath, host string) bool {
	return r.matchesMethod(method) && r.matchesHost(host) && r.matchesPath(cleanPath)
}

// matchesMethod reports whether the route takes method: any, without
// methods.
func (r *Route) matchesMethod(method string) bool {
	if len(r.Methods) == 0 {
		return true
	}
	for _, m := range r.Methods {
		if m == method {
			return true
		}
	}
	return false
}

// matchesHost reports whether the route takes host (port allowed): any,
// without a host; "*.domain" takes every name under domain, not domain.
func (r *Route) matchesHost(host string) bool {
	if r.Host == "" {
		return true
	}
	h := strings.ToLower(hostOnly(host))
	if suffix, wild := strings.CutPrefix(r.Host, "*"); wild {
		return strings.HasSuffix(h, suffix) && len(h) != len(suffix)
	}
	return h == r.Host
}

// matchesPath reports whether the normalised cleanPath is under the
// route's path prefix, segment by segment (/api takes /api and /api/x,
// not /apix).
func (r *Route) matchesPath(cleanPath string) bool {
	if r.PathPrefix == "" || r.PathPrefix == "/" {
		return true
	}
	if !strings.HasPrefix(cleanPath, r.PathPrefix) {
		return false
	}
	return len(cleanPath) == len(r.PathPrefix) || cleanPath[len(r.PathPrefix)] == '/'
}

// hostOnly strips a port from host ("example.com:8443", "[::1]:80").
func hostOnly(host string) string {
	if strings.HasPrefix(host, "[") {
		if i := strings.IndexByte(host, ']'); i > 0 {
			return host[1:i]
		}
		return host
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 && strings.Count(host, ":") == 1 {
		return host[:i]
	}
	return host
}

// forwardAuth decodes the forward_auth section: who may call it, how the
// original request is read and the routes that limit it.
func (d *decoder) forwardAuth(n *yaml.Node, c *Config) *ForwardAuth {
	f := d.fields(n, "forward_auth", forwardAuthSection)
	if f == nil {
		return nil
	}
	fa := &ForwardAuth{}
	d.clientAddress(n, f, fa)
	if x, ok := f["path_case"]; ok {
		fa.PathCaseSensitive = d.pathCase(x.val)
	}
	if x, ok := f["unmatched"]; ok {
		fa.Unmatched = d.unmatched(x.val)
	}
	x, ok := f["routes"]
	if !ok {
		d.errorf(n, "forward_auth.routes is missing: nothing would be limited")
		return fa
	}
	fa.Routes = d.routes(x.val, c, fa)
	return fa
}

// clientAddress decodes how forward_auth reads the client's address: the
// trusted proxies and the header they set, refusing what package
// clientip would refuse.
func (d *decoder) clientAddress(n *yaml.Node, f map[string]field, fa *ForwardAuth) {
	fa.TrustedProxies = d.trustedProxies(n, f)
	if x, ok := f["client_ip_header"]; ok {
		fa.ClientIPHeader = http.CanonicalHeaderKey(d.str(x.val, "forward_auth.client_ip_header"))
	}
	if _, err := clientip.New(clientip.Config{TrustedProxies: fa.TrustedProxies, Header: fa.ClientIPHeader}); err != nil && len(fa.TrustedProxies) > 0 {
		d.errorf(n, "forward_auth: %v", err)
	}
}

// routes decodes forward_auth.routes, leaving out those in error.
func (d *decoder) routes(n *yaml.Node, c *Config, fa *ForwardAuth) []*Route {
	var out []*Route
	for i, rn := range d.sequence(n, "forward_auth.routes") {
		if r := d.route(rn, c, fa, i+1); r != nil {
			out = append(out, r)
		}
	}
	return out
}

// trustedProxies decodes forward_auth.trusted_proxies, which must list at
// least one address or network.
func (d *decoder) trustedProxies(n *yaml.Node, f map[string]field) []netip.Prefix {
	var out []netip.Prefix
	items := 0
	if x, ok := f["trusted_proxies"]; ok {
		for _, item := range d.sequence(x.val, "forward_auth.trusted_proxies") {
			items++
			s := d.str(item, "forward_auth.trusted_proxies item")
			ps, err := clientip.ParsePrefixes(s)
			if err != nil {
				d.errorf(item, "forward_auth.trusted_proxies: %v", err)
				continue
			}
			out = append(out, ps...)
		}
	}
	if items == 0 {
		d.errorf(n, "forward_auth.trusted_proxies is missing or empty: list the addresses of the proxies that call sluice (such as 127.0.0.1/32); without them the original request cannot be read")
	}
	return out
}

// pathCase decodes forward_auth.path_case: whether paths are compared
// case-sensitively.
func (d *decoder) pathCase(n *yaml.Node) bool {
	switch s := d.str(n, "forward_auth.path_case"); s {
	case "insensitive":
	case "sensitive":
		return true
	default:
		d.errorf(n, "forward_auth.path_case must be insensitive (the default: /LOGIN is matched as /login) or sensitive, got %q", s)
	}
	return false
}

// unmatched decodes forward_auth.unmatched: what happens to a request no
// route matches.
func (d *decoder) unmatched(n *yaml.Node) Unmatched {
	switch s := d.str(n, "forward_auth.unmatched"); s {
	case "allow":
	case "deny":
		return UnmatchedDeny
	default:
		d.errorf(n, "forward_auth.unmatched must be allow (no limit) or deny, got %q", s)
	}
	return UnmatchedAllow
}

// route decodes the num-th route of forward_auth: what it matches (path
// prefix, methods, host) and the limits that apply to it.
func (d *decoder) route(n *yaml.Node, c *Config, fa *ForwardAuth, num int) *Route {
	f := d.fields(n, "route", routeSection)
	if f == nil {
		return nil
	}
	r := &Route{Line: n.Line}
	r.Name = "route " + strconv.Itoa(num)
	if x, ok := f["name"]; ok {
		r.Name = d.str(x.val, "route name")
	}
	what := "forward_auth route " + r.Name
	d.routeMatch(f, r, what, fa.PathCaseSensitive)
	x, ok := f["limits"]
	if !ok {
		d.errorf(n, "%s: limits is missing (a list of {policy, key})", what)
		return nil
	}
	r.Limits = d.routeLimits(x.val, c, what)
	if len(r.Limits) == 0 {
		d.errorf(x.val, "%s: limits is empty", what)
		return nil
	}
	return r
}

// routeMatch decodes what route r matches: its path prefix, methods and
// host, each when set.
func (d *decoder) routeMatch(f map[string]field, r *Route, what string, caseSensitive bool) {
	if x, ok := f["path_prefix"]; ok {
		r.PathPrefix = d.pathPrefix(x.val, what, caseSensitive)
	}
	if x, ok := f["methods"]; ok {
		r.Methods = d.methods(x.val, what)
	}
	if x, ok := f["host"]; ok {
		r.Host = d.routeHost(x.val, what)
	}
}

// routeHost decodes a route's host, lower-cased: a host name without
// port, or *.domain.
func (d *decoder) routeHost(n *yaml.Node, what string) string {
	host := strings.ToLower(d.str(n, what+": host"))
	if !validRouteHost(host) {
		d.errorf(n, "%s: host must be a host name without port, or *.domain, got %q", what, host)
	}
	return host
}

// pathPrefix decodes a route's path_prefix, which must be a normalised path
// a request can have; it returns it as requests are matched (lower-case
// unless caseSensitive).
func (d *decoder) pathPrefix(n *yaml.Node, what string, caseSensitive bool) string {
	prefix := d.str(n, what+": path_prefix")
	clean, err := CleanPath(prefix)
	switch {
	case !strings.HasPrefix(prefix, "/"):
		d.errorf(n, "%s: path_prefix must start with /, got %q", what, prefix)
	case err != nil || strings.ContainsAny(prefix, "?#"):
		d.errorf(n, "%s: path_prefix %q can never match: requests are matched by their path without query, fragment or control characters", what, prefix)
	case clean != strings.TrimSuffix(prefix, "/") && clean != prefix:
		d.errorf(n, "%s: path_prefix %q is not a normalised path (requests are matched after decoding percent-escapes, dropping ;parameters, resolving . and .. and merging slashes; write %q)", what, prefix, clean)
	case !caseSensitive:
		return strings.ToLower(clean)
	default:
		return clean
	}
	return prefix
}

// methods decodes a route's methods: upper-case HTTP method names.
func (d *decoder) methods(n *yaml.Node, what string) []string {
	var out []string
	for _, m := range d.sequence(n, what+": methods") {
		s := d.str(m, what+": method")
		if s == "" || s != strings.ToUpper(s) || strings.ContainsAny(s, " \t/:") {
			d.errorf(m, "%s: method must be an upper-case HTTP method such as GET or POST, got %q", what, s)
			continue
		}
		out = append(out, s)
	}
	return out
}

// validRouteHost reports whether host (lower-cased) is a host name without
// port, or "*." and a domain.
func validRouteHost(host string) bool {
	if host == "" || strings.ContainsAny(host, "/: ") || strings.Contains(host[1:], "*") {
		return false
	}
	return !strings.HasPrefix(host, "*") || strings.HasPrefix(host, "*.")
}

// routeLimits decodes a route's limits, leaving out those in error.
func (d *decoder) routeLimits(n *yaml.Node, c *Config, what string) []*RouteLimit {
	var out []*RouteLimit
	for _, ln := range d.sequence(n, what+": limits") {
		if l := d.routeLimit(ln, c, what); l != nil {
			out = append(out, l)
		}
	}
	return out
}

// keyForms lists the forms of a route limit's key, for messages.
const keyForms = "client_ip, header:NAME or claim:NAME, a list of them (the first present counts) or {all: [...]} (each present counts)"

// routeLimit decodes one limit of a route: a policy of sluice's format and
// the key it counts under.
func (d *decoder) routeLimit(n *yaml.Node, c *Config, what string) *RouteLimit {
	f := d.fields(n, what+": limit", routeLimitSection)
	if f == nil {
		return nil
	}
	l := &RouteLimit{}
	x, ok := f["policy"]
	if !ok {
		d.errorf(n, "%s: limit without a policy", what)
		return nil
	}
	l.Policy = d.limitPolicy(x.val, c, what)
	k, ok := f["key"]
	if !ok {
		d.errorf(n, "%s: limit %s has no key (client_ip, header:NAME or claim:NAME, or a list of them)", what, l.Policy)
		return nil
	}
	l.Line = n.Line
	if !d.limitKey(k.val, l, what) {
		return nil
	}
	return l
}

// limitPolicy decodes a route limit's policy, which must be one of
// sluice's format (policies, not an Envoy domain's).
func (d *decoder) limitPolicy(n *yaml.Node, c *Config, what string) string {
	name := d.str(n, what+": policy")
	if p := c.Policy(name); p == nil || p.Envoy {
		d.errorf(n, "%s: policy %q is not defined in policies", what, name)
	} else if p.Algorithm == driver.AlgorithmInFlight {
		d.errorf(n, "%s: policy %q is in_flight: a forward-auth sub-request ends before the request it guards, so its lease could not be held (use POST /v1/leases)", what, name)
	} else if p.Grants {
		d.errorf(n, "%s: policy %q has grants: a route's limits are decided all or none (sluice AllowAll), which a policy deciding on its own grants cannot join (use a policy without grants, or POST /v1/check)", what, name)
	}
	return name
}

// limitKey decodes a route limit's key n into l: its sources, and
// whether each present counts; false when it has none.
func (d *decoder) limitKey(n *yaml.Node, l *RouteLimit, what string) bool {
	items, all, ok := d.keyItems(n, what)
	if !ok {
		return false
	}
	l.All = all
	l.Keys = d.keySources(items, what)
	if len(l.Keys) == 0 {
		d.errorf(n, "%s: key is empty: want %s", what, keyForms)
		return false
	}
	return true
}

// keyItems returns the sources a route limit's key n lists, in any of its
// forms (one source, a list, {first: [...]} or {all: [...]}), and whether
// each present counts (all); ok is false when n has none of these forms.
func (d *decoder) keyItems(n *yaml.Node, what string) (items []*yaml.Node, all, ok bool) {
	kn := d.resolve(n)
	switch {
	case kn == nil:
		return nil, false, false
	case kn.Kind == yaml.SequenceNode:
		return d.sequence(kn, what+": key"), false, true
	case kn.Kind == yaml.MappingNode:
		return d.keyMapping(kn, what)
	default:
		return []*yaml.Node{kn}, false, true
	}
}

// keyMapping returns the sources of a key written as a mapping: {first:
// [...]} or {all: [...]}, exactly one of them.
func (d *decoder) keyMapping(kn *yaml.Node, what string) (items []*yaml.Node, all, ok bool) {
	m := d.mapping(kn, what+": key", "first", "all")
	if m == nil {
		return nil, false, false
	}
	first, hasFirst := m["first"]
	allField, hasAll := m["all"]
	switch {
	case hasFirst && hasAll:
		d.errorf(kn, "%s: key has both first and all: write one", what)
		return nil, false, false
	case hasAll:
		return d.sequence(allField.val, what+": key.all"), true, true
	case hasFirst:
		return d.sequence(first.val, what+": key.first"), false, true
	default:
		d.errorf(kn, "%s: key must be %s", what, keyForms)
		return nil, false, false
	}
}

// keySources parses the sources of a key, refusing unknown and repeated
// ones.
func (d *decoder) keySources(items []*yaml.Node, what string) []KeySource {
	var out []KeySource
	seen := map[KeySource]bool{}
	for _, item := range items {
		s := d.str(item, what+": key")
		src, ok := parseKeySource(s)
		if !ok {
			d.errorf(item, "%s: key %q must be client_ip, header:NAME or claim:NAME", what, s)
			continue
		}
		if seen[src] {
			d.errorf(item, "%s: key %s is listed twice", what, src)
			continue
		}
		seen[src] = true
		out = append(out, src)
	}
	return out
}

func parseKeySource(s string) (KeySource, bool) {
	if s == "client_ip" {
		return KeySource{Kind: KeyClientIP}, true
	}
	kind, name, ok := strings.Cut(s, ":")
	k, known := namedKeyKinds[kind]
	if !ok || !known || !validHeaderName(name) {
		return KeySource{}, false
	}
	return KeySource{Kind: k, Name: http.CanonicalHeaderKey(name)}, true
}

// namedKeyKinds are the kinds of key source that name a header, by the
// word before the colon.
var namedKeyKinds = map[string]KeyKind{"header": KeyHeader, "claim": KeyClaim}

// maxHeaderName is the longest header name a key source may name.
const maxHeaderName = 128

// validHeaderName reports whether s is an HTTP token (RFC 9110, 5.6.2).
func validHeaderName(s string) bool {
	if s == "" || len(s) > maxHeaderName {
		return false
	}
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(tokenBytes, s[i]) < 0 {
			return false
		}
	}
	return true
}

// tokenBytes are the bytes of an HTTP token (RFC 9110, 5.6.2).
const tokenBytes = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-.^_`|~"

// ClientChosen reports whether a client can give itself a new identity for
// this limit on every request, by sending a new value of a header: a list
// (the first present counts) with a header: in it, or {all: [...]} with
// nothing but header: sources. client_ip and claim: (set by the trusted
// proxy) are not the client's to choose.
func (l *RouteLimit) ClientChosen() bool {
	headers := 0
	for _, k := range l.Keys {
		if k.Kind == KeyHeader {
			headers++
		}
	}
	if l.All {
		return headers == len(l.Keys)
	}
	return headers > 0
}

// Warnings returns what the section allows though it is most likely not
// meant, one sentence each, naming file (the configuration's source) and
// line: a route on which every limit is keyed by a header the client
// chooses, so that a client sending a new value on each request is never
// limited. sluice validate-config prints them and sluice serve logs them
// at every load; they do not refuse the configuration (a limit per header
// value is legitimate beside another route or proxy that bounds clients).
func (fa *ForwardAuth) Warnings(file string) []string {
	if fa == nil {
		return nil
	}
	var out []string
	for _, r := range fa.Routes {
		if !r.clientChosen() {
			continue
		}
		srcs := r.headerSources()
		out = append(out, fmt.Sprintf("%s:%d: forward_auth route %s: every limit can be keyed by a header the client chooses (%s): "+
			"a client that sends a new value on each request is never limited; count per address as well "+
			"(key: {all: [client_ip, %s]}) or key by a claim the proxy sets after authenticating the client (claim:NAME)",
			file, r.Line, r.Name, strings.Join(srcs, ", "), srcs[0]))
	}
	return out
}

// clientChosen reports whether r has limits and a client can escape
// every one of them with a new header value (RouteLimit.ClientChosen).
func (r *Route) clientChosen() bool {
	for _, l := range r.Limits {
		if !l.ClientChosen() {
			return false
		}
	}
	return len(r.Limits) > 0
}

// headerSources are the header: key sources of r's limits, as written.
func (r *Route) headerSources() []string {
	var srcs []string
	for _, l := range r.Limits {
		for _, k := range l.Keys {
			if k.Kind == KeyHeader {
				srcs = append(srcs, k.String())
			}
		}
	}
	return srcs
}
