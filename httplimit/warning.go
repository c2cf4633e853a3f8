package httplimit

import "strings"

// HeaderWarning is the header that names the limits whose warning
// threshold an allowed request crossed (sluice.WithWarning,
// Result.Warning), as a structured-field list of their quoted policy
// names: X-RateLimit-Warning: "api". It is sent only when asked for
// (Config.Warning, HeaderOptions.Warning), only on allowed requests, and
// never names a Hidden limit or a limiter in shadow mode.
const HeaderWarning = "X-RateLimit-Warning"

// warningField returns HeaderWarning's value for st: the advertised limits
// whose Result warns, "" for none (and for a refused request).
func (s *Status) warningField() string {
	if !s.Allowed {
		return ""
	}
	var b strings.Builder
	for i := range s.Limits {
		l := &s.Limits[i]
		if !l.advertised() || !l.Result.Warning {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(sfString(l.Name))
	}
	return b.String()
}

// Warned returns the names of the limits whose warning threshold the
// request crossed (Result.Warning), hidden and shadow ones included.
func (s *Status) Warned() []string {
	var names []string
	for _, l := range s.Limits {
		if l.Result.Warning {
			names = append(names, l.Name)
		}
	}
	return names
}

// HeaderBlocked is the header that names, on a refused request, the
// limits whose penalty (sluice.WithPenalty) blocks the key
// (Result.Blocked), as a structured-field list of their quoted policy
// names: X-RateLimit-Blocked: "login". Retry-After is then at least the
// block's end. It is sent whenever a shown limit is blocked; never for a
// Hidden limit or a limiter in shadow mode.
const HeaderBlocked = "X-RateLimit-Blocked"

// blockedField returns HeaderBlocked's value for st: the advertised limits
// whose Result is blocked, "" for none (and for an allowed request).
func (s *Status) blockedField() string {
	if s.Allowed {
		return ""
	}
	var b strings.Builder
	for i := range s.Limits {
		l := &s.Limits[i]
		if !l.advertised() || !l.Result.Blocked {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(sfString(l.Name))
	}
	return b.String()
}
