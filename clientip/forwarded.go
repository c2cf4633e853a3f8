package clientip

import (
	"net/netip"
	"strings"
)

// parseForwarded returns the for= address of each element of the RFC 7239
// Forwarded header lines, left to right, at most max of the right-most
// ones. An element without exactly one for= parameter, or whose for= is not
// an address ("unknown", an obfuscated identifier, garbage), is the zero
// Addr. Empty elements are ignored.
func parseForwarded(lines []string, max int) []netip.Addr {
	var hops []netip.Addr
	for _, line := range lines {
		// A proxy appends its element after the client's text. If that
		// text leaves a quoted string open, a quote-aware split would
		// swallow the proxy's element into it; addresses never contain
		// ',' or ';', so such a line is split on every separator instead.
		quotes := balanced(line)
		split(line, ',', quotes, func(el string) {
			if strings.TrimSpace(el) == "" {
				return
			}
			if len(hops) == 2*max {
				hops = append(hops[:0], hops[max:]...)
			}
			hops = append(hops, forwardedFor(el, quotes))
		})
	}
	if len(hops) > max {
		hops = hops[len(hops)-max:]
	}
	return hops
}

// forwardedFor returns the address of the for= parameter of one element.
func forwardedFor(el string, quotes bool) netip.Addr {
	var f forParams
	split(el, ';', quotes, f.add)
	if f.bad || f.n != 1 {
		return netip.Addr{}
	}
	return f.addr
}

// forParams tallies the for= parameters of one Forwarded element.
type forParams struct {
	addr netip.Addr // of the last for=
	n    int        // for= parameters seen
	bad  bool       // a pair without '=', or a malformed for= value
}

// add reads one name=value pair of the element.
func (f *forParams) add(pair string) {
	pair = strings.TrimSpace(pair)
	if pair == "" {
		return
	}
	name, value, ok := strings.Cut(pair, "=")
	if !ok {
		f.bad = true
		return
	}
	if !strings.EqualFold(strings.TrimSpace(name), "for") {
		return
	}
	f.n++
	v, ok := unquote(strings.TrimSpace(value))
	if !ok {
		f.bad = true
		return
	}
	f.addr, _ = ParseAddr(v)
}

// quoteScanner follows quoted strings (RFC 9110, section 5.6.4) through a
// text read byte by byte.
type quoteScanner struct {
	quoted  bool // inside a quoted string
	escaped bool // the byte before was a '\' inside a quoted string
}

// inside reads the next byte c and reports whether it belongs to a quoted
// string: its quotes, its escapes or its content.
func (q *quoteScanner) inside(c byte) bool {
	switch {
	case q.escaped:
		q.escaped = false
		return true
	case q.quoted && c == '\\':
		q.escaped = true
		return true
	case c == '"':
		q.quoted = !q.quoted
		return true
	}
	return q.quoted
}

// split calls f with each part of s separated by sep, outside quoted
// strings when quotes is set.
func split(s string, sep byte, quotes bool, f func(string)) {
	start := 0
	var q quoteScanner
	for i := 0; i < len(s); i++ {
		inQuotes := quotes && q.inside(s[i])
		if s[i] == sep && !inQuotes {
			f(s[start:i])
			start = i + 1
		}
	}
	f(s[start:])
}

// balanced reports whether every quoted string in s is closed.
func balanced(s string) bool {
	var q quoteScanner
	for i := 0; i < len(s); i++ {
		q.inside(s[i])
	}
	return !q.quoted
}

// unquote returns the value of a token or quoted-string (RFC 9110, section
// 5.6.4). ok is false for a malformed quoted string.
func unquote(v string) (string, bool) {
	if !strings.HasPrefix(v, `"`) {
		return plainToken(v)
	}
	if len(v) < 2 || !strings.HasSuffix(v, `"`) {
		return "", false
	}
	return unescapeQuoted(v[1 : len(v)-1])
}

// plainToken returns v when it is a token: no quote, space, tab or '\'.
func plainToken(v string) (string, bool) {
	if strings.ContainsAny(v, "\" \t\\") {
		return "", false
	}
	return v, true
}

// unescapeQuoted returns the content of a quoted string, v without its
// quotes, with its escapes resolved; ok is false for a bare '"' or a
// trailing '\'.
func unescapeQuoted(v string) (string, bool) {
	if strings.Contains(v, `\`) {
		return unescape(v)
	}
	if strings.Contains(v, `"`) {
		return "", false
	}
	return v, true
}

// unescape resolves the escapes of unescapeQuoted's v.
func unescape(v string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch c {
		case '\\':
			if i+1 == len(v) {
				return "", false
			}
			i++
			b.WriteByte(v[i])
		case '"':
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}
