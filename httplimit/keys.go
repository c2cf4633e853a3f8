package httplimit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
)

// A KeyFunc returns the identity a limit counts a request against, such as
// the client's address or API key. An empty identity means it found none:
// the Limit's Missing says whether the request is then refused (the
// default), counted by a fallback KeyFunc, or skipped by the limit.
//
// The identities of the KeyFuncs of this package are built with
// sluice.Identity and start with their dimension ("ip", "header",
// "principal", "const"), so KeyFuncs of different kinds never share a count.
// Any func(*http.Request) string works too; build its identity with
// sluice.Identity, and hash values that hold secrets or personal data.
type KeyFunc func(r *http.Request) string

// ClientAddr keys requests by client address as res finds it: the TCP peer,
// or the address a trusted proxy forwarded (see package clientip), IPv6
// grouped by prefix. Its identity is "ip:<address or prefix>". Limit
// anonymous traffic this way; clients behind one NAT share the count.
//
// Security: forwarding headers are read only from the proxies res trusts.
// With a zero clientip.Config every request is keyed by its TCP peer, which
// behind a proxy is the proxy itself.
func ClientAddr(res *clientip.Resolver) KeyFunc {
	if res == nil {
		res = clientip.MustNew(clientip.Config{})
	}
	return func(r *http.Request) string {
		return sluice.Identity("ip", res.Key(r))
	}
}

// Header keys requests by the value of the named header, such as an API key
// in "X-API-Key". The value is hashed with SHA-256 first, so API keys and
// tokens never reach the store in clear: the identity is
// "header:<lower-case name>:<hex digest>". It finds no key for a request
// without the header: Limit.Missing says what happens to it (by default it
// is refused; FallBack(ClientAddr(res)) counts it by address).
//
// Security: any client can send any value. A limit keyed by an unchecked
// header is a limit per value, not per customer: pair it with a limit by
// ClientAddr, or authenticate first and key by Principal.
func Header(name string) KeyFunc {
	name = strings.ToLower(http.CanonicalHeaderKey(name))
	return func(r *http.Request) string {
		v := r.Header.Get(name)
		if v == "" {
			return ""
		}
		sum := sha256.Sum256([]byte(v))
		return sluice.Identity("header", name, hex.EncodeToString(sum[:]))
	}
}

// Principal keys requests by the authenticated principal that earlier
// middleware stored in the request context under ctxKey. The value must be
// a non-empty string or a fmt.Stringer; it finds no key for a request
// without one (see Limit.Missing). The identity is "principal:<value>": hash principals that
// are e-mail addresses or other personal data before storing them.
func Principal(ctxKey any) KeyFunc {
	return func(r *http.Request) string {
		var id string
		switch v := r.Context().Value(ctxKey).(type) {
		case string:
			id = v
		case fmt.Stringer:
			id = v.String()
		}
		if id == "" {
			return ""
		}
		return sluice.Identity("principal", id)
	}
}

// Constant keys every request by the same identity, "const:<id>": a global
// limit shared by all clients, such as the capacity of a backend.
func Constant(id string) KeyFunc {
	key := sluice.Identity("const", id)
	return func(*http.Request) string { return key }
}
