package sfvtest

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Headers is what CheckHeaders read from a response's rate-limit headers.
// A field that was absent has its Has flag false.
type Headers struct {
	Policies []Policy // RateLimit-Policy, in order
	Limits   []Limit  // RateLimit, in order

	HasX                       bool // X-RateLimit-Limit, -Remaining and -Reset
	XLimit, XRemaining, XReset int64

	HasRetryAfter bool
	RetryAfter    int64 // seconds
}

// A Policy is one item of RateLimit-Policy.
type Policy struct {
	Name string
	Q    int64 // quota
	W    int64 // window in seconds; 0 when absent
}

// A Limit is one item of RateLimit.
type Limit struct {
	Name string
	R    int64 // remaining
	T    int64 // seconds until more quota; meaningful when HasT
	HasT bool
}

// Limit returns the RateLimit item named name.
func (h *Headers) Limit(name string) (Limit, bool) {
	for _, l := range h.Limits {
		if l.Name == name {
			return l, true
		}
	}
	return Limit{}, false
}

// Policy returns the RateLimit-Policy item named name.
func (h *Headers) Policy(name string) (Policy, bool) {
	for _, p := range h.Policies {
		if p.Name == name {
			return p, true
		}
	}
	return Policy{}, false
}

// values returns the lines of the field name, matched case-insensitively:
// sluice serve reports headers spelled as the drafts spell them, which
// http.Header's canonical form does not.
func values(h http.Header, name string) []string {
	var out []string
	for k, v := range h {
		if strings.EqualFold(k, name) {
			out = append(out, v...)
		}
	}
	return out
}

// nonNegative parses a delay-seconds style value: 1 to 15 digits.
func nonNegative(name, s string) (int64, error) {
	if s == "" || len(s) > 15 || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("%s: %q is not a non-negative integer", name, s)
	}
	return strconv.ParseInt(s, 10, 64)
}

func single(h http.Header, name string) (string, bool, error) {
	v := values(h, name)
	switch len(v) {
	case 0:
		return "", false, nil
	case 1:
		return v[0], true, nil
	}
	return "", false, fmt.Errorf("%s: %d lines, want one", name, len(v))
}

func intParam(it Item, field, key string, required bool) (int64, bool, error) {
	v, ok := it.Param(key)
	if !ok {
		if required {
			return 0, false, fmt.Errorf("%s: item %q lacks %q", field, it.Value, key)
		}
		return 0, false, nil
	}
	n, isInt := v.(int64)
	if !isInt || n < 0 {
		return 0, false, fmt.Errorf("%s: item %q: %s=%v is not a non-negative Integer", field, it.Value, key, v)
	}
	return n, true, nil
}

// list parses the lines of a List field as one List (RFC 9651, section
// 3.1: lines are joined with commas) of String items with only the
// parameters allowed, and unique names.
func list(h http.Header, field string, allowed ...string) ([]Item, error) {
	lines := values(h, field)
	if len(lines) == 0 {
		return nil, nil
	}
	items, err := ParseList(strings.Join(lines, ", "))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("%s: empty list", field)
	}
	seen := map[string]bool{}
	for _, it := range items {
		if err := checkMember(field, it, seen, allowed); err != nil {
			return nil, err
		}
	}
	return items, nil
}

// checkMember checks one item of the List field: a String whose name is
// not in seen (it is added), with only the allowed parameters.
func checkMember(field string, it Item, seen map[string]bool, allowed []string) error {
	name, ok := it.Value.(string)
	if !ok {
		return fmt.Errorf("%s: item %v is not a String", field, it.Value)
	}
	if seen[name] {
		return fmt.Errorf("%s: two items named %q", field, name)
	}
	seen[name] = true
	for _, p := range it.Params {
		if !contains(allowed, p.Key) {
			return fmt.Errorf("%s: item %q has unknown parameter %q", field, name, p.Key)
		}
	}
	return nil
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// CheckHeaders parses every rate-limit header of h strictly and checks
// what draft-ietf-httpapi-ratelimit-headers and the conventions require:
//
//   - RateLimit-Policy: a List of String items with a non-negative Integer
//     q and, when present, a positive Integer w; RateLimit: a List of String
//     items with a non-negative Integer r and, when present, a non-negative
//     Integer t; no other parameters; no name twice in one field; with both
//     fields, every RateLimit item has its policy;
//   - X-RateLimit-Limit, -Remaining and -Reset: all three or none,
//     non-negative integers, Remaining at most Limit;
//   - Retry-After: delay-seconds, at least 1, and never earlier than the t
//     of a RateLimit item with no quota left (r=0).
func CheckHeaders(h http.Header) (Headers, error) {
	var out Headers
	for _, check := range []func(*Headers, http.Header) error{
		(*Headers).checkPolicies, (*Headers).checkLimits, (*Headers).checkX, (*Headers).checkRetryAfter,
	} {
		if err := check(&out, h); err != nil {
			return out, err
		}
	}
	return out, nil
}

// checkPolicies parses RateLimit-Policy.
func (out *Headers) checkPolicies(h http.Header) error {
	pol, err := list(h, "RateLimit-Policy", "q", "w")
	if err != nil {
		return err
	}
	for _, it := range pol {
		p, err := policyOf(it)
		if err != nil {
			return err
		}
		out.Policies = append(out.Policies, p)
	}
	return nil
}

// policyOf reads the parameters of one RateLimit-Policy item: q, and w
// (positive) when present.
func policyOf(it Item) (Policy, error) {
	p := Policy{Name: it.Value.(string)}
	var err error
	if p.Q, _, err = intParam(it, "RateLimit-Policy", "q", true); err != nil {
		return p, err
	}
	var hasW bool
	if p.W, hasW, err = intParam(it, "RateLimit-Policy", "w", false); err != nil {
		return p, err
	}
	if hasW && p.W == 0 {
		return p, fmt.Errorf("RateLimit-Policy: item %q: w must be positive", p.Name)
	}
	return p, nil
}

// checkLimits parses RateLimit, each item of which has its policy when
// RateLimit-Policy is sent.
func (out *Headers) checkLimits(h http.Header) error {
	lim, err := list(h, "RateLimit", "r", "t")
	if err != nil {
		return err
	}
	withPolicies := len(values(h, "RateLimit-Policy")) > 0
	for _, it := range lim {
		l, err := limitOf(it)
		if err != nil {
			return err
		}
		if _, ok := out.Policy(l.Name); withPolicies && !ok {
			return fmt.Errorf("RateLimit: item %q has no RateLimit-Policy item", l.Name)
		}
		out.Limits = append(out.Limits, l)
	}
	return nil
}

// limitOf reads the parameters of one RateLimit item: r, and t when
// present.
func limitOf(it Item) (Limit, error) {
	l := Limit{Name: it.Value.(string)}
	var err error
	if l.R, _, err = intParam(it, "RateLimit", "r", true); err != nil {
		return l, err
	}
	l.T, l.HasT, err = intParam(it, "RateLimit", "t", false)
	return l, err
}

// xHeaders are the conventional X-RateLimit headers, all three or none.
var xHeaders = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}

// checkX parses the X-RateLimit headers.
func (out *Headers) checkX(h http.Header) error {
	x, n, err := xValues(h)
	if err != nil {
		return err
	}
	switch n {
	case 0:
		return nil
	case 3:
	default:
		return fmt.Errorf("%d of the three X-RateLimit headers", n)
	}
	out.HasX = true
	for i, p := range []*int64{&out.XLimit, &out.XRemaining, &out.XReset} {
		if *p, err = nonNegative(xHeaders[i], x[i]); err != nil {
			return err
		}
	}
	if out.XRemaining > out.XLimit {
		return fmt.Errorf("X-RateLimit-Remaining %d above X-RateLimit-Limit %d", out.XRemaining, out.XLimit)
	}
	return nil
}

// xValues returns the values of the X-RateLimit headers, in the order of
// xHeaders, and how many of the three were sent.
func xValues(h http.Header) (x [3]string, n int, err error) {
	for i, name := range xHeaders {
		v, ok, err := single(h, name)
		if err != nil {
			return x, n, err
		}
		if ok {
			x[i] = v
			n++
		}
	}
	return x, n, nil
}

// checkRetryAfter parses Retry-After, which must not be earlier than the
// t of an exhausted RateLimit item (checkLimits runs first).
func (out *Headers) checkRetryAfter(h http.Header) error {
	v, ok, err := single(h, "Retry-After")
	if err != nil || !ok {
		return err
	}
	out.HasRetryAfter = true
	if out.RetryAfter, err = nonNegative("Retry-After", v); err != nil {
		return err
	}
	if out.RetryAfter < 1 {
		return fmt.Errorf("Retry-After: 0 invites an immediate retry")
	}
	for _, l := range out.Limits {
		if l.exhaustedBeyond(out.RetryAfter) {
			return fmt.Errorf("Retry-After %d is earlier than t=%d of exhausted policy %q", out.RetryAfter, l.T, l.Name)
		}
	}
	return nil
}

// exhaustedBeyond reports whether l has no quota left and gets more only
// after seconds.
func (l Limit) exhaustedBeyond(seconds int64) bool {
	return l.R == 0 && l.HasT && l.T > seconds
}
