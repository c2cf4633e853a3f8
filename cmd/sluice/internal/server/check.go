package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// POST /v1/check: one check, or several decided together.

// checkItem is one check of POST /v1/check.
type checkItem struct {
	Policy string `json:"policy"`
	Key    string `json:"key"`
	// Cost is the number of units to take (default 1; 0 peeks).
	Cost *int64 `json:"cost"`
	// Plan names the policy's plan to decide under (default: none, the
	// policy's own limit).
	Plan string `json:"plan,omitempty"`
}

type checkRequest struct {
	checkItem
	Checks []checkItem `json:"checks"`
}

// Result is the JSON form of a decision.
type Result struct {
	Policy       string `json:"policy,omitempty"`
	Key          string `json:"key,omitempty"`
	Allowed      bool   `json:"allowed"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	ResetAfterMS int64  `json:"reset_after_ms"`
	Degraded     bool   `json:"degraded"`
	Shadow       bool   `json:"shadow"`
	// Source says which limit decided: "override", "plan" or "policy".
	Source string `json:"source"`
	// Plan is the plan the check named, when it named one.
	Plan string `json:"plan,omitempty"`
	// Rule is the rule in force for the key, the one that decided: the
	// plan's or the policy's, with the key override's limit and window or
	// rate (sluice.Rule.InForce); WindowMS is its window (for TokenBucket
	// and GCRA the time to refill from empty), as the headers' w shows it
	// in seconds.
	Rule     string `json:"rule"`
	WindowMS int64  `json:"window_ms"`
	// OverrideInvalid reports a key override the store could not use.
	OverrideInvalid bool `json:"override_invalid,omitempty"`
	// Warning reports an allowed decision past the policy's warn_at.
	Warning bool `json:"warning,omitempty"`
	// Blocked reports a refusal by the policy's penalty: the key is
	// blocked, RetryAfterMS and ResetAfterMS are the time left of the
	// block; BlockStarted that this refusal started it.
	Blocked      bool              `json:"blocked,omitempty"`
	BlockStarted bool              `json:"block_started,omitempty"`
	Headers      map[string]string `json:"headers,omitempty"`
	// DenyStatus is, on a refusal, the HTTP status to answer the client
	// with (the policy's deny_status, 429 by default); DenyBody the JSON
	// body to send, when the policy has a deny_body.
	DenyStatus int             `json:"deny_status,omitempty"`
	DenyBody   json.RawMessage `json:"deny_body,omitempty"`
}

// MultiResult is the answer to {"checks":[...]}.
type MultiResult struct {
	Allowed      bool     `json:"allowed"`
	RetryAfterMS int64    `json:"retry_after_ms"`
	Results      []Result `json:"results"`
	// DenyStatus and DenyBody are, on a refusal, those of the result
	// refused longest: its policy's response.
	DenyStatus int             `json:"deny_status,omitempty"`
	DenyBody   json.RawMessage `json:"deny_body,omitempty"`
}

func toResult(p *policy, key, plan string, cost int64, r sluice.Result) Result {
	rule := p.ruleOf(plan, r)
	out := Result{
		Policy: p.cfg.Name, Key: key, Allowed: r.Allowed, Limit: r.Limit, Remaining: r.Remaining,
		RetryAfterMS: ceilMS(r.RetryAfter), ResetAfterMS: ceilMS(r.ResetAfter),
		Degraded: r.Degraded, Shadow: r.Shadowed, Headers: headers(p, plan, cost, r),
		Source: r.Source.String(), Plan: plan, Rule: rule.String(), WindowMS: ceilMS(rule.Period()),
		OverrideInvalid: r.OverrideInvalid, Warning: r.Warning, Blocked: r.Blocked, BlockStarted: r.BlockStarted,
	}
	denyOf(&out, p, r)
	return out
}

// decodeCheck reads and validates a POST /v1/check body.
func (s *Server) decodeCheck(w http.ResponseWriter, r *http.Request) (checkRequest, error) {
	var req checkRequest
	data, err := s.readLimited(w, r)
	if err != nil {
		return req, err
	}
	return req, parseCheck(data, &req)
}

// parseCheck decodes one JSON object strictly (decodeStrict: unknown or
// repeated fields, trailing data, bytes that are not UTF-8; readCheck
// reads the usual body directly, as decodeStrict would), and refuses
// mixed single/multi forms.
func parseCheck(data []byte, req *checkRequest) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return bad(http.StatusBadRequest, `the body is empty; send {"policy":"...","key":"...","cost":1}`)
	}
	if !readCheck(data, req) {
		*req = checkRequest{}
		if err := decodeStrict(data, req); err != nil {
			return err
		}
	}
	if req.Checks != nil {
		return validChecks(req)
	}
	return validItem(&req.checkItem, "")
}

// validChecks validates the multi form, {"checks":[...]}: no single-check
// field beside it, 1 to MaxChecks checks, each valid.
func validChecks(req *checkRequest) error {
	if req.Policy != "" || req.Key != "" || req.Cost != nil || req.Plan != "" {
		return bad(http.StatusBadRequest, `send either one check ({"policy","key","cost","plan"}) or {"checks":[...]}, not both`)
	}
	if len(req.Checks) == 0 {
		return bad(http.StatusBadRequest, "checks is empty")
	}
	if len(req.Checks) > MaxChecks {
		return bad(http.StatusBadRequest, "at most %d checks per request, got %d", MaxChecks, len(req.Checks))
	}
	for i := range req.Checks {
		if err := validItem(&req.Checks[i], fmt.Sprintf("checks[%d].", i)); err != nil {
			return err
		}
	}
	return nil
}

func jsonError(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("%v at byte %d", se, se.Offset)
	case errors.As(err, &te):
		if te.Field != "" {
			return fmt.Sprintf("%s must be %s, got %s", jsonField(te.Field), jsonType(te.Type.Kind().String()), te.Value)
		}
		return fmt.Sprintf("want a JSON object, got %s", te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends too early"
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// jsonField is the path of a field of a request body as the client wrote
// it: without the embedded item type (checkItem, reserveItem, settleItem)
// that encoding/json puts in front of a top-level field.
func jsonField(field string) string {
	for _, embedded := range []string{"checkItem.", "reserveItem.", "settleItem."} {
		if f, ok := strings.CutPrefix(field, embedded); ok {
			return f
		}
	}
	return field
}

func jsonType(kind string) string {
	switch kind {
	case "int64", "int":
		return "a whole number"
	case "string":
		return "a string"
	case "slice":
		return "a list"
	}
	return kind
}

func validItem(c *checkItem, where string) error {
	if err := validTarget(c.Policy, c.Key, where); err != nil {
		return err
	}
	if c.Cost == nil {
		one := int64(1)
		c.Cost = &one
	} else if *c.Cost < 0 {
		return bad(http.StatusBadRequest, "%scost must not be negative, got %d", where, *c.Cost)
	}
	return nil
}

// handleCheck is POST /v1/check: one decision, or several taken all or
// none ({"checks":[...]}).
func (s *Server) handleCheck(w http.ResponseWriter, r *http.Request) {
	req, err := s.decodeCheck(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	st := s.state.Load()
	if req.Checks == nil {
		s.checkOne(w, r, st, req)
		return
	}
	s.checkAll(w, r, st, req)
}

// checkOne decides a single check and answers with its Result, the
// policy's rate-limit headers set on the response too.
func (s *Server) checkOne(w http.ResponseWriter, r *http.Request, st *state, req checkRequest) {
	p, err := st.policy(req.Policy, "")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := p.rateOnly(""); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := p.checkPlan(req.Plan, "", *req.Cost); err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := admit(r.Context(), s, wait[sluice.Result]{
		pols: []*policy{p}, keys: []string{req.Key}, costs: []int64{*req.Cost},
		results: func(res sluice.Result) []sluice.Result { return []sluice.Result{res} },
		decide: func(ctx context.Context) (sluice.Result, error) {
			return p.limiter.AllowPlan(ctx, req.Key, req.Plan, *req.Cost)
		},
	})
	if err != nil {
		s.fail(w, r, s.decisionError(err, p))
		return
	}
	s.refused.note(p.cfg, req.Key, res)
	out := toResult(p, "", req.Plan, *req.Cost, res)
	for k, v := range out.Headers {
		w.Header()[k] = []string{v} // as spelled in the drafts, not canonicalized
	}
	writeResult(w, http.StatusOK, &out)
}

// checkAll decides the checks of the multi form together (sluice.AllowAll)
// and answers with a MultiResult.
func (s *Server) checkAll(w http.ResponseWriter, r *http.Request, st *state, req checkRequest) {
	checks, pols, err := st.multiChecks(req.Checks)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d, err := admit(r.Context(), s, allowAllWait(checks, pols))
	if err != nil {
		s.fail(w, r, s.decisionError(err, nil))
		return
	}
	out := MultiResult{Allowed: d.Allowed, RetryAfterMS: ceilMS(d.RetryAfter()), Results: make([]Result, len(d.Results))}
	for i, res := range d.Results {
		s.refused.note(pols[i].cfg, req.Checks[i].Key, res)
		out.Results[i] = toResult(pols[i], req.Checks[i].Key, req.Checks[i].Plan, *req.Checks[i].Cost, res)
	}
	if b := denier(d); b >= 0 {
		out.DenyStatus, out.DenyBody = out.Results[b].DenyStatus, out.Results[b].DenyBody
	}
	writeJSON(w, http.StatusOK, out)
}

// multiChecks resolves each item's policy and plan into the checks to
// decide, with the policy of each.
func (st *state) multiChecks(items []checkItem) ([]sluice.Check, []*policy, error) {
	checks := make([]sluice.Check, len(items))
	pols := make([]*policy, len(items))
	for i, c := range items {
		p, err := st.policy(c.Policy, fmt.Sprintf("checks[%d].", i))
		if err != nil {
			return nil, nil, err
		}
		if err := p.rateOnly(fmt.Sprintf("checks[%d].", i)); err != nil {
			return nil, nil, err
		}
		if p.cfg.Grants {
			return nil, nil, bad(http.StatusBadRequest, "checks[%d].policy %q has grants: it decides on its own against its grant in this process, and the multi form takes its checks all or none (send it as a single check)", i, p.cfg.Name)
		}
		if err := p.checkPlan(c.Plan, fmt.Sprintf("checks[%d].", i), *c.Cost); err != nil {
			return nil, nil, err
		}
		pols[i] = p
		checks[i] = sluice.Check{Limiter: p.limiter, Key: c.Key, Cost: *c.Cost, Plan: c.Plan}
	}
	return checks, pols, nil
}

// checkPlan refuses a plan the policy does not have, and a cost over the
// plan's limit that could never be allowed (unless an override may raise
// it).
func (p *policy) checkPlan(plan, where string, cost int64) error {
	rule, ok := p.limiter.PlanRule(plan)
	if !ok {
		if len(plan) > 64 {
			plan = plan[:64] + "..."
		}
		return bad(http.StatusBadRequest, "%splan %q is not a plan of policy %q (it has %v)", where, plan, p.cfg.Name, p.limiter.Plans())
	}
	if cost > rule.Limit && !p.cfg.Overrides {
		return bad(http.StatusBadRequest, "%scost %d exceeds the limit %d of policy %q and could never be allowed", where, cost, rule.Limit, p.cfg.Name)
	}
	return nil
}

func (st *state) policy(name, where string) (*policy, error) {
	p := st.policies[name]
	if p == nil {
		if len(name) > 64 {
			name = name[:64] + "..."
		}
		return nil, bad(http.StatusNotFound, "%spolicy %q is not configured (GET /v1/policies lists them)", where, name)
	}
	return p, nil
}

// rateOnly refuses an in_flight policy in POST /v1/check: a unit taken
// there could never be released.
func (p *policy) rateOnly(where string) error {
	if p.cfg.Algorithm == driver.AlgorithmInFlight {
		return bad(http.StatusBadRequest, "%spolicy %q is in_flight: take a lease with POST /v1/leases/acquire, not /v1/check", where, p.cfg.Name)
	}
	return nil
}
