package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// GET /v1/policies.

// policyInfo is one entry of GET /v1/policies.
type policyInfo struct {
	Name        string   `json:"name"`
	Algorithm   string   `json:"algorithm"`
	Limit       int64    `json:"limit"`
	Window      string   `json:"window,omitempty"`
	Rate        string   `json:"rate,omitempty"`
	Lease       string   `json:"lease,omitempty"` // in_flight
	Rule        string   `json:"rule"`
	OnFailure   string   `json:"on_failure"`
	Shadow      bool     `json:"shadow"`
	Timeout     string   `json:"timeout"`
	Headers     []string `json:"headers"`
	Description string   `json:"description,omitempty"`
	Envoy       bool     `json:"envoy,omitempty"`
	Domain      string   `json:"domain,omitempty"`
	// Overrides says whether decisions read key overrides (PUT
	// /v1/overrides): a key's limit may then differ from Rule.
	Overrides bool `json:"overrides"`
	// Plans are the policy's plans, in the order configured; a check
	// naming one is decided under its rule.
	Plans []planInfo `json:"plans"`
	// ShowKeys is how the policy's keys appear among the top refused keys.
	ShowKeys string `json:"show_keys"`
	// WarnAt is warn_at (omitted for none); DenyStatus and DenyBody the
	// response to the policy's refusals.
	WarnAt     int             `json:"warn_at,omitempty"`
	DenyStatus int             `json:"deny_status"`
	DenyBody   json.RawMessage `json:"deny_body,omitempty"`
	// Grants is grants: auto.
	Grants bool `json:"grants,omitempty"`
}

// planInfo is one plan of a policy in GET /v1/policies.
type planInfo struct {
	Name   string `json:"name"`
	Limit  int64  `json:"limit"`
	Window string `json:"window,omitempty"`
	Rate   string `json:"rate,omitempty"`
	Rule   string `json:"rule"`
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
			OnFailure: map[sluice.FailMode]string{sluice.FailOpen: "allow", sluice.FailClosed: "deny", sluice.FailShare: "share"}[c.FailMode],
			Shadow:    c.Shadow, Headers: c.Headers.Names(), Description: c.Description, Envoy: c.Envoy, Domain: c.Domain,
			Timeout: decisionTimeout(c).String(), Overrides: c.Overrides, Plans: []planInfo{}, ShowKeys: c.ShowKeys.String(),
			WarnAt: c.WarnAt, DenyStatus: p.denyStatus(), Grants: c.Grants,
		}
		if c.DenyBody != nil {
			info.DenyBody = json.RawMessage(c.DenyBody)
		}
		for _, pl := range c.Plans {
			rule, _ := p.limiter.PlanRule(pl.Name)
			pi := planInfo{Name: pl.Name, Limit: rule.Limit, Rule: rule.String()}
			if rule.Algorithm.Rated() {
				pi.Rate = fmt.Sprintf("%g/s", float64(time.Second)/float64(rule.Interval))
			} else {
				pi.Window = rule.Period().String()
			}
			info.Plans = append(info.Plans, pi)
		}
		switch {
		case c.Algorithm == driver.AlgorithmInFlight:
			info.Lease = c.Params.Lease.String()
		case c.Algorithm.Rated():
			info.Rate = fmt.Sprintf("%g/%s", c.Params.Rate, unitName(c.Params.Per))
		default:
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
