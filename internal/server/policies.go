package server

import (
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
)

// GET /v1/policies.

// policyInfo is one entry of GET /v1/policies.
type policyInfo struct {
	Name        string   `json:"name"`
	Algorithm   string   `json:"algorithm"`
	Limit       int64    `json:"limit"`
	Window      string   `json:"window,omitempty"`
	Rate        string   `json:"rate,omitempty"`
	Rule        string   `json:"rule"`
	OnFailure   string   `json:"on_failure"`
	Shadow      bool     `json:"shadow"`
	Timeout     string   `json:"timeout"`
	Headers     []string `json:"headers"`
	Description string   `json:"description,omitempty"`
	Envoy       bool     `json:"envoy,omitempty"`
	Domain      string   `json:"domain,omitempty"`
}

func (s *Server) handlePolicies(w http.ResponseWriter, r *http.Request) {
	st := s.state.Load()
	out := struct {
		Source   string       `json:"source"`
		LoadedAt time.Time    `json:"loaded_at"`
		Store    string       `json:"store"`
		Policies []policyInfo `json:"policies"`
	}{Source: st.cfg.Source, LoadedAt: st.loadedAt.UTC().Truncate(time.Second), Store: s.opts.StoreName, Policies: []policyInfo{}}
	for _, p := range st.order {
		c := p.cfg
		info := policyInfo{
			Name: c.Name, Algorithm: c.Algorithm.String(), Limit: c.Limit, Rule: p.limiter.Rule().String(),
			OnFailure: map[sluice.FailMode]string{sluice.FailOpen: "allow", sluice.FailClosed: "deny"}[c.FailMode],
			Shadow:    c.Shadow, Headers: c.Headers.Names(), Description: c.Description, Envoy: c.Envoy, Domain: c.Domain,
			Timeout: decisionTimeout(c).String(),
		}
		if c.Algorithm.Rated() {
			info.Rate = fmt.Sprintf("%g/%s", c.Params.Rate, unitName(c.Params.Per))
		} else {
			info.Window = c.Window().String()
		}
		out.Policies = append(out.Policies, info)
	}
	writeJSON(w, http.StatusOK, out)
}

func unitName(d time.Duration) string {
	switch d {
	case time.Second:
		return "s"
	case time.Minute:
		return "m"
	case time.Hour:
		return "h"
	case 24 * time.Hour:
		return "d"
	}
	return d.String()
}
