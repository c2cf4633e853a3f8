package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// The rate-limit header names, as the conventions and the draft spell them.
const (
	HeaderXLimit     = "X-RateLimit-Limit"
	HeaderXRemaining = "X-RateLimit-Remaining"
	HeaderXReset     = "X-RateLimit-Reset"
	HeaderPolicy     = "RateLimit-Policy"
	HeaderRateLimit  = "RateLimit"
	HeaderRetryAfter = "Retry-After"
)

// headerNames lists the headers WriteHeaders may set.
var headerNames = [...]string{HeaderXLimit, HeaderXRemaining, HeaderXReset, HeaderPolicy, HeaderRateLimit, HeaderRetryAfter, HeaderWarning, HeaderBlocked}

// HeaderOptions says which rate-limit headers WriteHeaders sets, and how.
// The zero value sets them all, X-RateLimit-Reset in delta seconds.
type HeaderOptions struct {
	// OmitXRateLimit leaves out X-RateLimit-Limit, -Remaining and -Reset.
	OmitXRateLimit bool
	// OmitRateLimit leaves out the draft's RateLimit-Policy and RateLimit.
	OmitRateLimit bool
	// OmitRetryAfter leaves out Retry-After on refusals.
	OmitRetryAfter bool
	// ResetEpoch makes X-RateLimit-Reset the Unix time, in whole seconds
	// rounded up, of the moment the limit is fully restored, counted from
	// Now.
	ResetEpoch bool
	// Now is the time of the decision, for ResetEpoch.
	Now time.Time
	// Warning sends HeaderWarning on allowed requests that crossed a
	// limit's warning threshold (default not sent).
	Warning bool
}

// WriteHeaders sets on h the rate-limit headers of st. It is the one
// writer of these headers: the Middleware and sluice serve both call it.
//
// Hidden limits, limiters in shadow mode and in-flight limits are never
// shown; degraded
// results (the store could not decide) are not shown in RateLimit nor in
// X-RateLimit-*, since nothing is known about the budget, while their
// policy stays in RateLimit-Policy.
//
//   - X-RateLimit-Limit, -Remaining and -Reset describe the most
//     restrictive shown limit (the refusing one with the longest wait, or
//     else the one with the fewest units left): its quota, its units left,
//     and the seconds until it is fully restored, rounded up (at least 1 on
//     a refusal), or with ResetEpoch the Unix time of that moment, rounded
//     up once.
//   - RateLimit-Policy has one item per shown limit, "name";q=Q;w=W: the
//     limit (Rule.Limit) per Rule.Period in whole seconds, rounded up.
//   - RateLimit has one item per shown result, "name";r=R;t=T: the units
//     left and the seconds, rounded up, until more are available
//     (Rule.NextUnit). t is left out when that is not known: when nothing
//     is used, and for the sliding algorithms unless the Result determines
//     it.
//   - Retry-After, on a refusal: the seconds, rounded up and at least 1,
//     until every refusing limit could allow the request, and never earlier
//     than the t of a refusing limit: for a key blocked by a penalty, the
//     block's end.
//   - X-RateLimit-Blocked, on a refusal, names the shown limits whose
//     penalty blocks the key (HeaderBlocked).
func WriteHeaders(h http.Header, st *Status, o HeaderOptions) {
	writeFields(st, o, h.Set)
}

// writeFields passes each header of st to set, by its name as spelled in
// HeaderXLimit and the other constants: WriteHeaders and HeaderFields
// write through it.
func writeFields(st *Status, o HeaderOptions, set func(name, value string)) {
	if !o.OmitXRateLimit {
		st.writeXRateLimit(o, set)
	}
	if !o.OmitRateLimit {
		st.writeRateLimit(set)
	}
	if !st.Allowed && !o.OmitRetryAfter {
		set(HeaderRetryAfter, strconv.FormatInt(st.retryAfterSeconds(), 10))
	}
	if o.Warning {
		if v := st.warningField(); v != "" {
			set(HeaderWarning, v)
		}
	}
	if v := st.blockedField(); v != "" {
		set(HeaderBlocked, v)
	}
}

// writeXRateLimit passes the X-RateLimit-* headers of st's binding limit,
// when there is one, to set.
func (st *Status) writeXRateLimit(o HeaderOptions, set func(name, value string)) {
	if b := st.binding(); b != nil {
		set(HeaderXLimit, strconv.FormatInt(b.Rule.Limit, 10))
		set(HeaderXRemaining, strconv.FormatInt(max(b.Result.Remaining, 0), 10))
		set(HeaderXReset, strconv.FormatInt(b.xReset(o), 10))
	}
}

// writeRateLimit passes the RateLimit-Policy and RateLimit headers of st,
// those that are not empty, to set.
func (st *Status) writeRateLimit(set func(name, value string)) {
	if v := st.policyField(); v != "" {
		set(HeaderPolicy, v)
	}
	if v := st.rateLimitField(); v != "" {
		set(HeaderRateLimit, v)
	}
}

// HeaderFields returns the headers WriteHeaders sets, keyed by their names
// as spelled in HeaderXLimit and the other constants, for callers that
// pass them on in another form (sluice serve's JSON answers).
func HeaderFields(st *Status, o HeaderOptions) map[string]string {
	m := make(map[string]string, len(headerNames))
	writeFields(st, o, func(name, value string) { m[name] = value })
	return m
}

// shown reports whether l's policy is shown in headers: not for hidden
// limits, shadow mode, or in-flight limits (not a quota per window).
func (l *LimitStatus) shown() bool {
	return !l.Hidden && !l.Shadow && l.Rule.Algorithm != driver.AlgorithmInFlight
}

// advertised reports whether l's result is shown in headers: its policy
// is, and the result is known (not degraded) and not a shadow decision.
func (l *LimitStatus) advertised() bool {
	return l.shown() && !l.Result.Degraded && !l.Result.Shadowed
}

// binding returns the limit the conventional headers describe: the refusing
// one with the longest wait, or else the one with the fewest units
// remaining (then the longest reset), among the advertised ones.
func (s *Status) binding() *LimitStatus {
	var b *LimitStatus
	for i := range s.Limits {
		l := &s.Limits[i]
		if !l.advertised() {
			continue
		}
		if b == nil || tighter(l, b) {
			b = l
		}
	}
	return b
}

func tighter(a, b *LimitStatus) bool {
	ra, rb := a.Result, b.Result
	if ra.Allowed != rb.Allowed {
		return !ra.Allowed
	}
	if !ra.Allowed && ra.RetryAfter != rb.RetryAfter {
		return ra.RetryAfter > rb.RetryAfter
	}
	if ra.Remaining != rb.Remaining {
		return ra.Remaining < rb.Remaining
	}
	return ra.ResetAfter > rb.ResetAfter
}

// full returns the time until l's limit is fully restored; for a refused
// request at least its RetryAfter.
func (l *LimitStatus) full() time.Duration {
	if !l.Result.Allowed {
		return max(l.Result.ResetAfter, l.Result.RetryAfter)
	}
	return l.Result.ResetAfter
}

// xReset returns X-RateLimit-Reset: the seconds until l is fully restored,
// rounded up (at least 1 on a refusal), or with o.ResetEpoch the Unix time
// of that moment, rounded up: one rounding, never a second late.
func (l *LimitStatus) xReset(o HeaderOptions) int64 {
	d := l.full()
	if o.ResetEpoch {
		return ceilUnix(o.Now.Add(max(d, 0)))
	}
	if !l.Result.Allowed {
		return max(seconds(d), 1)
	}
	return seconds(d)
}

// ceilUnix returns t in Unix seconds, rounded up.
func ceilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.After(time.Unix(s, 0)) {
		s++
	}
	return s
}

// nextUnit returns the RateLimit t of l: the seconds until more units are
// available, rounded up, when known.
func (l *LimitStatus) nextUnit() (int64, bool) {
	d, ok := NextUnit(l.Rule, l.Result, l.Cost)
	if !ok {
		return 0, false
	}
	return seconds(d), true
}

// retryAfterSeconds returns Retry-After for a refused request: its
// RetryAfter in whole seconds, rounded up and at least 1, and no earlier
// than the RateLimit t of any shown refusing limit (NextUnit is never
// later than RetryAfter; this makes the header's promise hold by
// construction).
func (s *Status) retryAfterSeconds() int64 {
	sec := RetryAfterSeconds(s.RetryAfter())
	for i := range s.Limits {
		l := &s.Limits[i]
		if !l.Result.Allowed && l.advertised() {
			if t, ok := l.nextUnit(); ok {
				sec = max(sec, t)
			}
		}
	}
	return sec
}

// policyField returns the RateLimit-Policy value: one item per shown
// limit, such as "api";q=100;w=60.
func (s *Status) policyField() string {
	var b strings.Builder
	for i := range s.Limits {
		l := &s.Limits[i]
		if !l.shown() {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(sfString(l.Name))
		b.WriteString(";q=")
		b.WriteString(strconv.FormatInt(l.Rule.Limit, 10))
		b.WriteString(";w=")
		b.WriteString(strconv.FormatInt(periodSeconds(l.Rule), 10))
	}
	return b.String()
}

// periodSeconds is r's Period in whole seconds, rounded up and at least 1:
// RateLimit-Policy's "w".
func periodSeconds(r sluice.Rule) int64 {
	return max(1, int64((r.Period()+time.Second-1)/time.Second))
}

// rateLimitField returns the RateLimit value: one item per advertised
// result, such as "api";r=42;t=17.
func (s *Status) rateLimitField() string {
	var b strings.Builder
	for i := range s.Limits {
		l := &s.Limits[i]
		if !l.advertised() {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(sfString(l.Name))
		b.WriteString(";r=")
		b.WriteString(strconv.FormatInt(max(l.Result.Remaining, 0), 10))
		if t, ok := l.nextUnit(); ok {
			b.WriteString(";t=")
			b.WriteString(strconv.FormatInt(t, 10))
		}
	}
	return b.String()
}

// sfString serialises s, printable ASCII, as an RFC 9651 String.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

// ProblemType is the problem type of refusals, registered by
// draft-ietf-httpapi-ratelimit-headers.
const ProblemType = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// Problem is the RFC 9457 body of a refusal.
type Problem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail,omitempty"`
	ViolatedPolicies []string `json:"violated-policies"`
}

// WriteProblem answers a refused request with 429 (or its Denier's
// DenyStatus) and an application/problem+json body naming the violated
// policies of st. It
// does not set Retry-After; the Middleware has.
func WriteProblem(w http.ResponseWriter, st *Status) {
	p := Problem{
		Type:             ProblemType,
		Title:            "Request cannot be satisfied as assigned quota has been exceeded",
		Status:           http.StatusTooManyRequests,
		ViolatedPolicies: []string{},
	}
	if st != nil {
		p.Status = st.DenyStatusCode()
		if v := st.Violated(); v != nil {
			p.ViolatedPolicies = v
		}
		p.Detail = "Too many requests: retry after " + secondsText(st.retryAfterSeconds()) + "."
	}
	body, _ := json.Marshal(p)
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(p.Status)
	w.Write(body)
}

// secondsText is n seconds in English: "1 second", "2 seconds".
func secondsText(n int64) string {
	if n == 1 {
		return "1 second"
	}
	return strconv.FormatInt(n, 10) + " seconds"
}

func defaultDeny(w http.ResponseWriter, r *http.Request) {
	st, _ := FromContext(r.Context())
	WriteRefusal(w, st)
}
