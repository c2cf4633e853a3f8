package driver

import (
	"crypto/sha256"
	"encoding/hex"
	"unsafe"
)

// MaxIdentityLen is the longest escaped identity kept verbatim in a key;
// longer ones are replaced by their SHA-256.
const MaxIdentityLen = 128

// Key returns the store key for identity under the limiter named name that
// enforces rule:
//
//	<prefix>:<name>:<state>:{<identity>}
//
// where state is rule.State(), the algorithm and its state format: limiters
// of different algorithms never share a key, even under one name.
// The identity is escaped (%, {, }, #, space, control and non-ASCII bytes
// are percent-encoded) and, when the escaped form is longer than
// MaxIdentityLen, replaced by "#" and its SHA-256 in hex. Distinct
// identities give distinct keys, and the braces make the identity the
// Valkey Cluster hash tag. name must be a valid limiter name (see WithName);
// prefix must not contain braces.
func Key(prefix, name string, rule Rule, identity string) string {
	b := AppendKey(make([]byte, 0, len(prefix)+len(name)+len(identity)+16), prefix, name, rule, identity)
	// b is never written again: the string shares its bytes, as
	// strings.Builder does, instead of copying them.
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// AppendKey appends Key(prefix, name, rule, identity) to dst.
func AppendKey(dst []byte, prefix, name string, rule Rule, identity string) []byte {
	dst = append(dst, prefix...)
	dst = append(dst, ':')
	dst = append(dst, name...)
	dst = append(dst, ':')
	dst = append(dst, rule.State()...)
	dst = append(dst, ':', '{')
	dst = appendIdentity(dst, identity)
	return append(dst, '}')
}

const hexDigits = "0123456789ABCDEF"

func mustEscape(c byte) bool {
	return c <= ' ' || c >= 0x7f || c == '%' || c == '{' || c == '}' || c == '#'
}

func appendIdentity(b []byte, id string) []byte {
	n := 0
	for i := 0; i < len(id); i++ {
		if mustEscape(id[i]) {
			n += 3
		} else {
			n++
		}
	}
	if n > MaxIdentityLen {
		sum := sha256.Sum256([]byte(id))
		b = append(b, '#')
		return hex.AppendEncode(b, sum[:])
	}
	if n == len(id) {
		return append(b, id...)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if mustEscape(c) {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		} else {
			b = append(b, c)
		}
	}
	return b
}
