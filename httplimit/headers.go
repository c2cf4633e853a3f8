package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names written by a Middleware.
const (
	HeaderXLimit     = "X-RateLimit-Limit"
	HeaderXRemaining = "X-RateLimit-Remaining"
	HeaderXReset     = "X-RateLimit-Reset"
	HeaderPolicy     = "RateLimit-Policy"
	HeaderRateLimit  = "RateLimit"
)

// advertised reports whether l's result is shown in headers: not hidden,
// and known (not degraded, not shadowed).
func (l *LimitStatus) advertised() bool {
	return !l.Hidden && !l.Result.Degraded && !l.Result.Shadowed
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

// reset returns the seconds until l's quota is restored, rounded up; for a
// refused request at least the Retry-After.
func (l *LimitStatus) reset() int64 {
	d := l.Result.ResetAfter
	if !l.Result.Allowed {
		d = max(d, l.Result.RetryAfter)
		return max(seconds(d), 1)
	}
	return seconds(d)
}

func (m *Middleware) writeHeaders(h http.Header, st *Status) {
	if !m.cfg.OmitXRateLimit {
		if b := st.binding(); b != nil {
			h.Set(HeaderXLimit, strconv.FormatInt(b.Quota, 10))
			h.Set(HeaderXRemaining, strconv.FormatInt(max(b.Result.Remaining, 0), 10))
			reset := b.reset()
			if m.cfg.ResetEpoch {
				at := m.cfg.Now().Add(time.Duration(reset) * time.Second)
				if at.Nanosecond() != 0 {
					at = at.Truncate(time.Second).Add(time.Second)
				}
				reset = at.Unix()
			}
			h.Set(HeaderXReset, strconv.FormatInt(reset, 10))
		}
	}
	if !m.cfg.OmitRateLimit {
		if v := st.policyField(); v != "" {
			h.Set(HeaderPolicy, v)
		}
		if v := st.rateLimitField(); v != "" {
			h.Set(HeaderRateLimit, v)
		}
	}
}

// policyField returns the RateLimit-Policy value: one item per limit that is
// not hidden, such as "api";q=100;w=60.
func (s *Status) policyField() string {
	var b strings.Builder
	for _, l := range s.Limits {
		if l.Hidden {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(l.policy)
	}
	return b.String()
}

// rateLimitField returns the RateLimit value: one item per advertised
// limit, such as "api";r=42;t=17.
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
		b.WriteString(";t=")
		b.WriteString(strconv.FormatInt(l.reset(), 10))
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

// WriteProblem answers a refused request with 429 and an
// application/problem+json body naming the violated policies of st. It
// does not set Retry-After; the Middleware has.
func WriteProblem(w http.ResponseWriter, st *Status) {
	p := Problem{
		Type:             ProblemType,
		Title:            "Request cannot be satisfied as assigned quota has been exceeded",
		Status:           http.StatusTooManyRequests,
		ViolatedPolicies: []string{},
	}
	if st != nil {
		if v := st.Violated(); v != nil {
			p.ViolatedPolicies = v
		}
		p.Detail = "Too many requests: retry after " + strconv.FormatInt(RetryAfterSeconds(st.RetryAfter()), 10) + " seconds."
	}
	body, _ := json.Marshal(p)
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusTooManyRequests)
	w.Write(body)
}

func defaultDeny(w http.ResponseWriter, r *http.Request) {
	st, _ := FromContext(r.Context())
	WriteProblem(w, st)
}
