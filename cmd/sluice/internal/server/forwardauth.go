package server

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/httplimit"
)

// Forward auth: a reverse proxy asks before passing a request on.
//
//	/v1/forward-auth         Traefik forwardAuth, Caddy forward_auth: the
//	                         original request in X-Forwarded-Method, -Uri,
//	                         -Host and -For; refused is 429.
//	/v1/forward-auth/nginx   nginx auth_request: X-Original-Method, -URI,
//	                         -Host and X-Forwarded-For; refused is 403 (the
//	                         only refusal auth_request passes on; the shipped
//	                         nginx configuration turns it into a 429).
//
// Any method is accepted (proxies differ in the method of the sub-request).

// flavor is what one proxy family sends and expects.
type flavor struct {
	name              string
	method, uri, host string
	refused           int
}

var (
	flavorForwarded = flavor{name: "forwarded", method: "X-Forwarded-Method", uri: "X-Forwarded-Uri", host: "X-Forwarded-Host", refused: http.StatusTooManyRequests}
	flavorNginx     = flavor{name: "nginx", method: "X-Original-Method", uri: "X-Original-Uri", host: "X-Original-Host", refused: http.StatusForbidden}
)

// forwardAuth is forward_auth of one applied configuration.
type forwardAuth struct {
	cfg      *config.ForwardAuth
	resolver *clientip.Resolver
	clientIP httplimit.KeyFunc
	routes   []fwdRoute
	// lastUntrustedLog rate-limits the warning about forwarding headers
	// from untrusted peers (unix nanoseconds).
	lastUntrustedLog atomic.Int64
}

type fwdRoute struct {
	cfg    *config.Route
	limits []fwdLimit
}

type fwdLimit struct {
	pol  *policy
	keys []config.KeySource
	all  bool
}

func newForwardAuth(cfg *config.ForwardAuth, policies map[string]*policy) (*forwardAuth, error) {
	if cfg == nil {
		return nil, nil
	}
	res, err := clientip.New(clientip.Config{TrustedProxies: cfg.TrustedProxies, Header: cfg.ClientIPHeader})
	if err != nil {
		return nil, fmt.Errorf("forward_auth: %w", err)
	}
	fa := &forwardAuth{cfg: cfg, resolver: res, clientIP: httplimit.ClientAddr(res)}
	for _, rc := range cfg.Routes {
		r := fwdRoute{cfg: rc}
		for _, lc := range rc.Limits {
			p := policies[lc.Policy]
			if p == nil {
				return nil, fmt.Errorf("forward_auth route %s: policy %q is not defined", rc.Name, lc.Policy)
			}
			r.limits = append(r.limits, fwdLimit{pol: p, keys: lc.Keys, all: lc.All})
		}
		fa.routes = append(fa.routes, r)
	}
	return fa, nil
}

// original is the request the proxy asks about.
type original struct {
	method, path, host string
	// bad says why the path cannot be matched (a control character in
	// it); such a request is refused.
	bad error
	// trusted: the peer is a trusted proxy, so the forwarded headers (and
	// claims) were read.
	trusted bool
}

// original reconstructs the proxied request from r: from the flavor's
// headers when the peer is a trusted proxy, from r itself otherwise.
func (fa *forwardAuth) original(r *http.Request, fl flavor) original {
	peer, ok := clientip.ParseAddr(r.RemoteAddr)
	trusted := false
	if ok {
		for _, p := range fa.cfg.TrustedProxies {
			trusted = trusted || p.Contains(peer)
		}
	}
	uri := r.RequestURI
	o := original{method: r.Method, host: r.Host, trusted: trusted}
	if trusted {
		if v := r.Header.Get(fl.method); v != "" {
			o.method = strings.ToUpper(v)
		}
		if v := r.Header.Get(fl.uri); v != "" {
			uri = v
		}
	}
	o.path, o.bad = fa.cfg.MatchPath(uri)
	if !trusted {
		return o
	}
	if v := r.Header.Get(fl.host); v != "" {
		o.host = v
	}
	return o
}

// keys appends to dst the identities a limit counts the request under:
// the first source present, or with all every source present; none when
// no source is present.
func (fa *forwardAuth) keys(dst []string, r *http.Request, o original, l *fwdLimit) []string {
	for _, src := range l.keys {
		var id string
		switch src.Kind {
		case config.KeyClientIP:
			id = fa.clientIP(r)
		case config.KeyHeader:
			id = httplimit.Header(src.Name)(r)
		case config.KeyClaim:
			if v := r.Header.Get(src.Name); v != "" && o.trusted {
				sum := sha256.Sum256([]byte(v))
				id = sluice.Identity("claim", strings.ToLower(src.Name), hex.EncodeToString(sum[:]))
			}
		}
		if id != "" {
			dst = append(dst, id)
			if !l.all {
				return dst
			}
		}
	}
	return dst
}

// resolve finds the first route that applies to o and builds its checks.
func (fa *forwardAuth) resolve(r *http.Request, o original) (*fwdRoute, []sluice.Check, []*policy) {
next:
	for i := range fa.routes {
		rt := &fa.routes[i]
		if !rt.cfg.Matches(o.method, o.path, o.host) {
			continue
		}
		checks := make([]sluice.Check, 0, len(rt.limits))
		pols := make([]*policy, 0, len(rt.limits))
		var ids []string
		for j := range rt.limits {
			l := &rt.limits[j]
			ids = fa.keys(ids[:0], r, o, l)
			if len(ids) == 0 {
				continue next // this route needs a key the request lacks
			}
			for _, k := range ids {
				checks = append(checks, sluice.Check{Limiter: l.pol.limiter, Key: k, Cost: 1})
				pols = append(pols, l.pol)
			}
		}
		return rt, checks, pols
	}
	return nil, nil, nil
}

// forwardedHeaders are the headers a request from an untrusted peer should
// not carry: seeing them means a proxy is missing from trusted_proxies.
var forwardedHeaders = []string{"X-Forwarded-For", "X-Forwarded-Uri", "X-Forwarded-Method", "X-Original-Uri", "X-Original-Method", "Forwarded"}

func (s *Server) warnUntrusted(fa *forwardAuth, r *http.Request) {
	for _, h := range forwardedHeaders {
		if r.Header.Get(h) == "" {
			continue
		}
		now := time.Now().UnixNano()
		last := fa.lastUntrustedLog.Load()
		if now-last > int64(10*time.Second) && fa.lastUntrustedLog.CompareAndSwap(last, now) {
			s.log.Warn("forward auth: forwarding headers from a peer outside forward_auth.trusted_proxies were ignored; "+
				"the request is judged as the peer's own (logged at most every 10s)", "peer", r.RemoteAddr, "header", h)
		}
		return
	}
}

// handleForwardAuth answers a reverse proxy's subrequest (flavor fl says
// how the proxy passes the original request): 200 lets the original
// through, fl.refused refuses it.
func (s *Server) handleForwardAuth(fl flavor) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		fa := s.state.Load().forward
		if fa == nil {
			problem(w, http.StatusNotFound, "forward auth is off: add a forward_auth section to the configuration")
			return
		}
		o := fa.original(r, fl)
		if !o.trusted {
			s.warnUntrusted(fa, r)
		}
		if o.bad != nil {
			refuseBadOriginal(w, fl, o.bad)
			return
		}
		rt, checks, pols := fa.resolve(r, o)
		if rt == nil {
			fa.answerUnmatched(w, fl, o)
			return
		}
		d, err := admit(r.Context(), s, allowAllWait(checks, pols))
		if err != nil {
			s.fail(w, r, s.decisionError(err, nil))
			return
		}
		for i, res := range d.Results {
			s.refused.note(pols[i].cfg, checks[i].Key, res)
		}
		writeForwardDecision(w, fl, rt, d, checks, pols)
	}
}

// refuseBadOriginal answers a subrequest whose original request could not
// be read. auth_request passes on only 401 and 403 (a 400 would become a
// 500, which the shipped nginx file lets through), so a flavor that
// refuses with 403 gets 403 here too.
func refuseBadOriginal(w http.ResponseWriter, fl flavor, bad error) {
	code := http.StatusBadRequest
	if fl.refused == http.StatusForbidden {
		code = http.StatusForbidden
	}
	problem(w, code, "forward auth: "+bad.Error()+"; refused rather than matched against the routes")
}

// answerUnmatched answers a request no route applies to, as
// forward_auth.unmatched says: refused, or let through.
func (fa *forwardAuth) answerUnmatched(w http.ResponseWriter, fl flavor, o original) {
	if fa.cfg.Unmatched == config.UnmatchedDeny {
		problem(w, fl.refused, fmt.Sprintf("no forward_auth route applies to %s %s (forward_auth.unmatched: deny)", o.method, o.path))
		return
	}
	w.WriteHeader(http.StatusOK)
}

// bindingResult returns the index of the limit that speaks for decision d:
// the refusing one that is refused longest, or the allowing one with the
// least left.
func bindingResult(d sluice.Decision) int {
	b := 0
	for i, res := range d.Results {
		cur := d.Results[b]
		switch {
		case d.Allowed && res.Remaining < cur.Remaining,
			!d.Allowed && !res.Allowed && (cur.Allowed || res.RetryAfter > cur.RetryAfter):
			b = i
		}
	}
	return b
}

// writeForwardDecision answers with decision d on route rt: the binding
// limit's rate-limit headers (none when it was decided degraded), then
// 200, or fl.refused with Retry-After.
func writeForwardDecision(w http.ResponseWriter, fl flavor, rt *fwdRoute, d sluice.Decision, checks []sluice.Check, pols []*policy) {
	b := bindingResult(d)
	res := d.Results[b]
	if !res.Degraded {
		for k, v := range headers(pols[b], "", checks[b].Cost, res) {
			w.Header()[k] = []string{v}
		}
	}
	if d.Allowed {
		if v := warningField(d, pols); v != "" {
			w.Header()[httplimit.HeaderWarning] = []string{v}
		}
		w.WriteHeader(http.StatusOK)
		return
	}
	// Refused: Retry-After always, whatever the policy's headers say;
	// the proxy hands it to the client. The policy refused longest
	// chooses the response: its status and body, or for nginx (which
	// passes on only 403) its name, for nginx to fetch the response.
	w.Header()["Retry-After"] = []string{strconv.FormatInt(httplimit.RetryAfterSeconds(d.RetryAfter()), 10)}
	dp := pols[denier(d)]
	detail := fmt.Sprintf("rate limited by policy %q (forward_auth route %s)", dp.cfg.Name, rt.cfg.Name)
	if fl.refused == http.StatusForbidden {
		w.Header().Set(headerDenyPolicy, dp.cfg.Name)
		problem(w, fl.refused, detail)
		return
	}
	writeDenied(w, dp, dp.denyStatus(), detail)
}

// warningField is X-RateLimit-Warning for allowed decision d: every
// policy of the route with warning_header whose decision warned, once
// each, in the route's order (as httplimit names several limits); "" for
// none. httplimit writes the value, leaving out shadow policies.
func warningField(d sluice.Decision, pols []*policy) string {
	st := httplimit.Status{Allowed: true}
	named := map[*policy]bool{}
	for i, res := range d.Results {
		p := pols[i]
		if !p.cfg.WarningHeader || !res.Warning || named[p] {
			continue
		}
		named[p] = true
		st.Limits = append(st.Limits, httplimit.LimitStatus{Name: p.cfg.Name, Rule: p.limiter.Rule(), Result: res, Shadow: p.cfg.Shadow})
	}
	return httplimit.HeaderFields(&st, httplimit.HeaderOptions{OmitXRateLimit: true, OmitRateLimit: true, OmitRetryAfter: true, Warning: true})[httplimit.HeaderWarning]
}

// ForwardAuthKey returns the key forward_auth counts a request under when
// src (client_ip, header:NAME or claim:NAME) reads value from it: the code
// that decides, run on a request that carries value (for client_ip, from
// that address). cfg (nil for none) gives the trusted proxies and the
// client address header. The keys are:
//
//	client_ip     ip:ADDR, IPv6 grouped by prefix (clientip), ':' escaped as \:
//	header:NAME   header:<lower-case name>:<SHA-256 of the value, hex>
//	claim:NAME    claim:<lower-case name>:<SHA-256 of the value, hex>
func ForwardAuthKey(cfg *config.ForwardAuth, src config.KeySource, value string) (string, error) {
	fc := &config.ForwardAuth{}
	if cfg != nil {
		fc = &config.ForwardAuth{TrustedProxies: cfg.TrustedProxies, ClientIPHeader: cfg.ClientIPHeader}
	}
	fa, err := newForwardAuth(fc, nil)
	if err != nil {
		return "", err
	}
	r := &http.Request{Method: http.MethodGet, Header: http.Header{}, RemoteAddr: "192.0.2.1:1"}
	o := original{method: http.MethodGet, path: "/"}
	switch src.Kind {
	case config.KeyClientIP:
		addr, err := netip.ParseAddr(value)
		if err != nil {
			return "", fmt.Errorf("client_ip: %q is not an IP address", value)
		}
		r.RemoteAddr = netip.AddrPortFrom(addr, 1).String()
	case config.KeyHeader, config.KeyClaim:
		if value == "" {
			return "", fmt.Errorf("%s: an empty value is not counted (the limit does not apply)", src)
		}
		r.Header.Set(src.Name, value)
		o.trusted = true // claims are read only from trusted proxies
	default:
		return "", fmt.Errorf("unknown key source %s", src)
	}
	ks := fa.keys(nil, r, o, &fwdLimit{keys: []config.KeySource{src}})
	if len(ks) == 0 {
		return "", fmt.Errorf("%s finds no key in %q", src, value)
	}
	return ks[0], nil
}
