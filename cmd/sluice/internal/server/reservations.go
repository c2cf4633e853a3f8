package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/httplimit"
)

// POST /v1/reservations/reserve and /v1/reservations/settle: reserve an
// estimate (one policy, or several together), settle it later with the
// real amount, from any instance (sluice.ReserveAll, sluice.SettleAll).

// reserveItem is one reservation of POST /v1/reservations/reserve.
type reserveItem struct {
	Policy   string `json:"policy"`
	Key      string `json:"key"`
	Estimate *int64 `json:"estimate"`
	Plan     string `json:"plan,omitempty"`
}

type reserveRequest struct {
	reserveItem
	Reservations []reserveItem `json:"reservations"`
}

// settleItem is one settle of POST /v1/reservations/settle.
type settleItem struct {
	Policy      string `json:"policy"`
	Key         string `json:"key"`
	Reservation string `json:"reservation"`
	Actual      *int64 `json:"actual"`
	Plan        string `json:"plan,omitempty"`
}

type settleRequest struct {
	settleItem
	Settlements []settleItem `json:"settlements"`
}

// ReserveResult is the JSON form of one reservation.
type ReserveResult struct {
	Policy       string `json:"policy,omitempty"`
	Key          string `json:"key,omitempty"`
	Allowed      bool   `json:"allowed"`
	Reservation  string `json:"reservation,omitempty"`
	Estimate     int64  `json:"estimate"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	ResetAfterMS int64  `json:"reset_after_ms"`
	Degraded     bool   `json:"degraded"`
	Shadow       bool   `json:"shadow"`
}

// MultiReserveResult is the answer to {"reservations":[...]}.
type MultiReserveResult struct {
	Allowed      bool            `json:"allowed"`
	RetryAfterMS int64           `json:"retry_after_ms"`
	Results      []ReserveResult `json:"results"`
}

// SettleResult is the JSON form of one settle.
type SettleResult struct {
	Policy string `json:"policy,omitempty"`
	Key    string `json:"key,omitempty"`
	// Settled is true when this call settled the reservation, false when
	// it was settled before.
	Settled bool `json:"settled"`
	// Status is "settled", "already_settled" or, in the multi form only,
	// "unknown" (a single settle answers 404).
	Status       string `json:"status"`
	Estimate     int64  `json:"estimate"`
	Actual       int64  `json:"actual"`
	Charged      int64  `json:"charged"`
	Unpaid       int64  `json:"unpaid"`
	Debt         int64  `json:"debt"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	ResetAfterMS int64  `json:"reset_after_ms"`
	Degraded     bool   `json:"degraded"`
	Error        string `json:"error,omitempty"`
}

// MultiSettleResult is the answer to {"settlements":[...]}.
type MultiSettleResult struct {
	Results []SettleResult `json:"results"`
}

// readLimited reads a request body within MaxBodyBytes: 413 beyond.
func (s *Server) readLimited(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, bad(http.StatusRequestEntityTooLarge, "the body is larger than %d bytes", s.opts.MaxBodyBytes)
		}
		return nil, bad(http.StatusBadRequest, "reading the body: %v", err)
	}
	return data, nil
}

// readBody reads a request body within MaxBodyBytes, refusing an empty
// one with the example of what to send.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, example string) ([]byte, error) {
	data, err := s.readLimited(w, r)
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, bad(http.StatusBadRequest, "the body is empty; send %s", example)
	}
	return data, nil
}

// validTarget checks an item's policy is named and its key valid (where
// names the item).
func validTarget(policy, key, where string) error {
	if policy == "" {
		return bad(http.StatusBadRequest, "%spolicy is missing", where)
	}
	return validKey(key, where)
}

// validKey checks a key is given and at most MaxKeyLen bytes.
func validKey(key, where string) error {
	if key == "" {
		return bad(http.StatusBadRequest, "%skey is missing or empty", where)
	}
	if len(key) > MaxKeyLen {
		return bad(http.StatusBadRequest, "%skey is %d bytes; at most %d are accepted", where, len(key), MaxKeyLen)
	}
	return nil
}

// reservingPolicy resolves a policy that takes reservations.
func (st *state) reservingPolicy(name, where string) (*policy, error) {
	p, err := st.policy(name, where)
	if err != nil {
		return nil, err
	}
	if p.cfg.Algorithm == driver.AlgorithmInFlight {
		return nil, bad(http.StatusBadRequest, "%spolicy %q is in_flight: it limits how many things run at once, with no estimate to settle; hold a lease instead (POST /v1/leases/acquire, then /v1/leases/release)", where, p.cfg.Name)
	}
	if p.cfg.Penalty != nil {
		return nil, bad(http.StatusBadRequest, "%spolicy %q has a penalty, which reservations do not decide: use /v1/check", where, p.cfg.Name)
	}
	if p.cfg.Grants {
		return nil, bad(http.StatusBadRequest, "%spolicy %q has grants: it decides against grants held in each process, and a reservation settles on Valkey's plain state, which it does not decide on (use a policy without grants)", where, p.cfg.Name)
	}
	if !p.limiter.Reservations() {
		return nil, bad(http.StatusBadRequest, "%spolicy %q (%v) takes no reservations: only fixed_window, token_bucket and gcra settle exactly", where, p.cfg.Name, p.cfg.Algorithm)
	}
	return p, nil
}

// decodeBody reads a request body within MaxBodyBytes and decodes it
// strictly into v (decodeStrict).
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, example string, v any) error {
	data, err := s.readBody(w, r, example)
	if err != nil {
		return err
	}
	return decodeStrict(data, v)
}

// oneOrMany returns the items of a request in the single form (one, when
// list is nil) or the multi form (list, under the field listName): the
// multi form may not set a single-form field too (oneSet; both is the
// refusal's text) and holds 1 to MaxChecks items.
func oneOrMany[T any](one T, oneSet bool, list []T, listName, both string) (items []T, multi bool, err error) {
	if list == nil {
		return []T{one}, false, nil
	}
	if oneSet {
		return nil, true, bad(http.StatusBadRequest, "%s", both)
	}
	if len(list) == 0 || len(list) > MaxChecks {
		return nil, true, bad(http.StatusBadRequest, "%s must hold 1 to %d entries, got %d", listName, MaxChecks, len(list))
	}
	return list, true, nil
}

// itemWhere is the prefix naming item i of the list listName in an
// error message, "" in the single form.
func itemWhere(multi bool, listName string, i int) string {
	if !multi {
		return ""
	}
	return fmt.Sprintf("%s[%d].", listName, i)
}

// handleReserve is POST /v1/reservations/reserve.
func (s *Server) handleReserve(w http.ResponseWriter, r *http.Request) {
	var req reserveRequest
	if err := s.decodeBody(w, r, `{"policy":"...","key":"...","estimate":4000}`, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	items, multi, err := oneOrMany(req.reserveItem, req.Policy != "" || req.Key != "" || req.Estimate != nil || req.Plan != "",
		req.Reservations, "reservations", `send either one reservation ({"policy","key","estimate"}) or {"reservations":[...]}, not both`)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	checks, pols, err := reserveChecks(s.state.Load(), items, multi)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d, err := admit(r.Context(), s, reserveAllWait(checks, pols))
	if err != nil {
		s.fail(w, r, s.decisionError(err, nil))
		return
	}
	s.writeReserved(w, d, items, pols, multi)
}

// reserveChecks validates the reservations and resolves them to checks,
// with the policy of each.
func reserveChecks(st *state, items []reserveItem, multi bool) ([]sluice.Check, []*policy, error) {
	checks := make([]sluice.Check, len(items))
	pols := make([]*policy, len(items))
	for i, it := range items {
		p, err := reserveCheck(st, it, itemWhere(multi, "reservations", i))
		if err != nil {
			return nil, nil, err
		}
		pols[i] = p
		checks[i] = sluice.Check{Limiter: p.limiter, Key: it.Key, Cost: *it.Estimate, Plan: it.Plan}
	}
	return checks, pols, nil
}

// reserveCheck validates one reservation (where names it) and returns its
// policy.
func reserveCheck(st *state, it reserveItem, where string) (*policy, error) {
	if err := validTarget(it.Policy, it.Key, where); err != nil {
		return nil, err
	}
	if it.Estimate == nil || *it.Estimate < 0 {
		return nil, bad(http.StatusBadRequest, "%sestimate must be given, a whole number of units from 0", where)
	}
	p, err := st.reservingPolicy(it.Policy, where)
	if err != nil {
		return nil, err
	}
	if err := p.checkPlan(it.Plan, where, *it.Estimate); err != nil {
		return nil, err
	}
	return p, nil
}

// writeReserved notes the refusals and answers with the reservations:
// 200, or 429 with Retry-After when refused.
func (s *Server) writeReserved(w http.ResponseWriter, d sluice.ReserveDecision, items []reserveItem, pols []*policy, multi bool) {
	results := make([]ReserveResult, len(items))
	for i, rv := range d.Reservations {
		s.refused.note(pols[i].cfg, items[i].Key, rv.Result)
		results[i] = ReserveResult{Allowed: rv.Allowed, Reservation: rv.ID, Estimate: rv.Estimate, Limit: rv.Limit, Remaining: rv.Remaining,
			RetryAfterMS: ceilMS(rv.RetryAfter), ResetAfterMS: ceilMS(rv.ResetAfter), Degraded: rv.Degraded, Shadow: rv.Shadowed}
		if multi {
			results[i].Policy, results[i].Key = items[i].Policy, items[i].Key
		}
	}
	status := http.StatusOK
	if !d.Allowed {
		status = http.StatusTooManyRequests
		w.Header()["Retry-After"] = []string{strconv.FormatInt(httplimit.RetryAfterSeconds(d.RetryAfter()), 10)}
	}
	if multi {
		writeJSON(w, status, MultiReserveResult{Allowed: d.Allowed, RetryAfterMS: ceilMS(d.RetryAfter()), Results: results})
		return
	}
	writeJSON(w, status, results[0])
}

// handleSettle is POST /v1/reservations/settle.
func (s *Server) handleSettle(w http.ResponseWriter, r *http.Request) {
	var req settleRequest
	if err := s.decodeBody(w, r, `{"policy":"...","key":"...","reservation":"...","actual":1234}`, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	items, multi, err := oneOrMany(req.settleItem, req.Policy != "" || req.Key != "" || req.Reservation != "" || req.Actual != nil || req.Plan != "",
		req.Settlements, "settlements", `send either one settle ({"policy","key","reservation","actual"}) or {"settlements":[...]}, not both`)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	checks, err := settleChecks(s.state.Load(), items, multi)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out, err := sluice.SettleAll(r.Context(), checks)
	if err != nil {
		if errors.Is(err, sluice.ErrInvalidReservation) {
			s.fail(w, r, bad(http.StatusBadRequest, "%s", err.Error()))
			return
		}
		s.fail(w, r, s.decisionError(err, nil))
		return
	}
	results, err := settleResults(out, items, multi)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if multi {
		writeJSON(w, http.StatusOK, MultiSettleResult{Results: results})
		return
	}
	writeJSON(w, http.StatusOK, results[0])
}

// settleChecks validates the settles and resolves them to settle checks.
func settleChecks(st *state, items []settleItem, multi bool) ([]sluice.SettleCheck, error) {
	checks := make([]sluice.SettleCheck, len(items))
	for i, it := range items {
		p, err := settleCheck(st, it, itemWhere(multi, "settlements", i))
		if err != nil {
			return nil, err
		}
		checks[i] = sluice.SettleCheck{Limiter: p.limiter, Key: it.Key, Plan: it.Plan, Reservation: it.Reservation, Actual: *it.Actual}
	}
	return checks, nil
}

// settleCheck validates one settle (where names it) and returns its
// policy.
func settleCheck(st *state, it settleItem, where string) (*policy, error) {
	if err := validTarget(it.Policy, it.Key, where); err != nil {
		return nil, err
	}
	if it.Reservation == "" {
		return nil, bad(http.StatusBadRequest, "%sreservation is missing (the id /v1/reservations/reserve answered)", where)
	}
	if it.Actual == nil || *it.Actual < 0 || *it.Actual > driver.MaxSettle {
		return nil, bad(http.StatusBadRequest, "%sactual must be given, a whole number of units from 0 to %d", where, int64(driver.MaxSettle))
	}
	p, err := st.reservingPolicy(it.Policy, where)
	if err != nil {
		return nil, err
	}
	if _, ok := p.limiter.PlanRule(it.Plan); !ok {
		return nil, p.checkPlan(it.Plan, where, 0)
	}
	return p, nil
}

// settleResults turns the settlements into their JSON form; a failed
// settle is an entry's status and error in the multi form, the error
// returned (404 for an unknown reservation) in the single form.
func settleResults(out []sluice.Settlement, items []settleItem, multi bool) ([]SettleResult, error) {
	results := make([]SettleResult, len(out))
	for i, x := range out {
		res := SettleResult{Settled: x.Settled, Status: "already_settled", Estimate: x.Estimate, Actual: x.Actual, Charged: x.Charged, Unpaid: x.Unpaid,
			Debt: x.Debt, Limit: x.Limit, Remaining: x.Remaining, RetryAfterMS: ceilMS(x.RetryAfter), ResetAfterMS: ceilMS(x.ResetAfter), Degraded: x.Degraded}
		if x.Settled {
			res.Status = "settled"
		}
		if multi {
			res.Policy, res.Key = items[i].Policy, items[i].Key
		}
		switch {
		case x.Err == nil:
		case errors.Is(x.Err, sluice.ErrUnknownReservation):
			if !multi {
				return nil, bad(http.StatusNotFound, "reservation %q of key %q is unknown to policy %q: never made, made for another key or policy, or expired", items[i].Reservation, items[i].Key, items[i].Policy)
			}
			res.Status, res.Error = "unknown", "unknown reservation: never made, made for another key or policy, or expired"
		default:
			if !multi {
				return nil, x.Err
			}
			res.Status, res.Error = "error", x.Err.Error()
		}
		results[i] = res
	}
	return results, nil
}

// reservationOptions turns reservations on for a policy whose algorithm
// keeps them, on a store that does (every store sluice serve runs on),
// with the policy's max_debt (nil: the default, the limit; 0: none); never
// with grants, which decide apart from the plain state reservations settle on.
func reservationOptions(p *config.Policy, store driver.Store) []sluice.Option {
	if _, ok := store.(driver.Reserver); !ok || p.Penalty != nil || p.Grants {
		return nil // neither a penalty nor grants are decided with reservations
	}
	switch p.Algorithm {
	case driver.AlgorithmFixedWindow, driver.AlgorithmTokenBucket, driver.AlgorithmGCRA:
	default:
		return nil
	}
	o := sluice.ReserveOptions{}
	if p.MaxDebt != nil {
		o.MaxDebt = *p.MaxDebt
		if o.MaxDebt == 0 {
			o.MaxDebt = sluice.NoDebt
		}
	}
	return []sluice.Option{sluice.WithReservations(o)}
}
