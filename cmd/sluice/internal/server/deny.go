package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice"
	problemjson "github.com/sluicehq/sluice/cmd/sluice/internal/problem"
)

// The response each policy chooses for its refusals (deny_status,
// deny_body): in /v1/check answers, for the caller to send, and as the
// forward-auth answer the proxy passes on.

// denyStatus is the HTTP status of p's refusals: deny_status, 429 by
// default.
func (p *policy) denyStatus() int {
	if p.cfg.DenyStatus != 0 {
		return p.cfg.DenyStatus
	}
	return http.StatusTooManyRequests
}

// denyOf fills the deny fields of a /v1/check result: on a refusal, the
// status (and body, when the policy has one) to answer the client with.
func denyOf(out *Result, p *policy, r sluice.Result) {
	if r.Allowed {
		return
	}
	out.DenyStatus = p.denyStatus()
	if p.cfg.DenyBody != nil {
		out.DenyBody = json.RawMessage(p.cfg.DenyBody)
	}
}

// denier returns the index of the refusing result that is refused longest
// (the first among equals): its policy answers; -1 when d is allowed.
func denier(d sluice.Decision) int {
	b := -1
	for i, res := range d.Results {
		if !res.Allowed && (b < 0 || res.RetryAfter > d.Results[b].RetryAfter) {
			b = i
		}
	}
	return b
}

// writeDenied answers a refusal with p's response: deny_body as
// application/json with deny_status, or else problem+json (detail) with
// deny_status.
func writeDenied(w http.ResponseWriter, p *policy, status int, detail string) {
	if p.cfg.DenyBody == nil {
		problemjson.Write(w, status, detail)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(p.cfg.DenyBody)))
	w.WriteHeader(status)
	w.Write(p.cfg.DenyBody)
}

// headerDenyPolicy names, in a refused nginx forward-auth answer, the
// policy whose response the client gets: the shipped nginx configuration
// fetches it from /v1/forward-auth/nginx/refused/{policy}.
const headerDenyPolicy = "X-Sluice-Deny-Policy"

// handleNginxRefused is GET /v1/forward-auth/nginx/refused/{policy}: the
// response policy chooses for its refusals, with its status. auth_request
// passes on only 401 and 403, so nginx refuses with 403 and then asks for
// the response here (deploy/nginx/sluice.conf's @ratelimited). It decides
// nothing and counts nothing.
//
// Without a policy (a refusal by forward_auth.unmatched or of a path that
// cannot be matched) it is 429 with problem+json.
func (s *Server) handleNginxRefused(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("policy")
	if name == "" {
		problemjson.Write(w, http.StatusTooManyRequests, "refused by forward auth")
		return
	}
	p, err := s.state.Load().policy(name, "")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeDenied(w, p, p.denyStatus(), fmt.Sprintf("rate limited by policy %q", p.cfg.Name))
}
