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
	var addr netip.Addr
	n := 0
	bad := false
	split(el, ';', quotes, func(pair string) {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			return
		}
		name, value, ok := strings.Cut(pair, "=")
		if !ok {
			bad = true
			return
		}
		if !strings.EqualFold(strings.TrimSpace(name), "for") {
			return
		}
		n++
		v, ok := unquote(strings.TrimSpace(value))
		if !ok {
			bad = true
			return
		}
		addr, _ = ParseAddr(v)
	})
	if bad || n != 1 {
		return netip.Addr{}
	}
	return addr
}

// split calls f with each part of s separated by sep, outside quoted
// strings when quotes is set.
func split(s string, sep byte, quotes bool, f func(string)) {
	start, quoted := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case !quotes:
			if c == sep {
				f(s[start:i])
				start = i + 1
			}
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == sep:
			f(s[start:i])
			start = i + 1
		}
	}
	f(s[start:])
}

// balanced reports whether every quoted string in s is closed.
func balanced(s string) bool {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		}
	}
	return !quoted
}

// unquote returns the value of a token or quoted-string (RFC 9110, section
// 5.6.4). ok is false for a malformed quoted string.
func unquote(v string) (string, bool) {
	if !strings.HasPrefix(v, `"`) {
		if strings.ContainsAny(v, "\" \t\\") {
			return "", false
		}
		return v, true
	}
	if len(v) < 2 || !strings.HasSuffix(v, `"`) {
		return "", false
	}
	v = v[1 : len(v)-1]
	if !strings.Contains(v, `\`) {
		if strings.Contains(v, `"`) {
			return "", false
		}
		return v, true
	}
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
