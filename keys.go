package sluice

import "strings"

// DefaultPrefix is the prefix of every key unless WithPrefix says otherwise.
// The version is part of it: a change of key layout is a new prefix, never
// a migration. A change of one algorithm's state format is a new
// Rule.State, which is part of the key.
const DefaultPrefix = "rl:v1"

// Identity joins parts into one identity, such as Identity("ip",
// "2001:db8::/64") or Identity("login", "user", hash). Each part is escaped
// so that distinct part lists give distinct identities: ':' separates parts
// and is escaped inside them.
func Identity(parts ...string) string {
	n := len(parts)
	for _, p := range parts {
		n += len(p) + strings.Count(p, ":") + strings.Count(p, `\`)
	}
	var b strings.Builder
	b.Grow(n)
	for i, p := range parts {
		if i > 0 {
			b.WriteByte(':')
		}
		if strings.IndexByte(p, ':') < 0 && strings.IndexByte(p, '\\') < 0 {
			b.WriteString(p) // nothing to escape: the usual part
			continue
		}
		for j := 0; j < len(p); j++ {
			c := p[j]
			if c == ':' || c == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(c)
		}
	}
	return b.String()
}

// MaxNameLength is the longest limiter name (WithName).
const MaxNameLength = 64

// checkName validates a limiter name: 1 to MaxNameLength characters of
// [A-Za-z0-9_.-].
func checkName(name string) error {
	if name == "" || len(name) > MaxNameLength {
		return invalidField("WithName", "name must be 1 to %d characters, got %d", MaxNameLength, len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return invalidField("WithName", "name %q may hold only letters, digits, '_', '.' and '-'", name)
		}
	}
	return nil
}

func checkPrefix(prefix string) error {
	if prefix == "" || strings.ContainsAny(prefix, "{}") {
		return invalidField("WithPrefix", "key prefix %q must be non-empty and hold no braces", prefix)
	}
	return nil
}
