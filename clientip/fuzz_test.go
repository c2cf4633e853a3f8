package clientip

import (
	"net/netip"
	"strings"
	"testing"
)

// FuzzAddr checks, for any header text a client can send, that
//   - nothing panics;
//   - from an untrusted peer the result is the peer;
//   - from a trusted proxy that appended the real client (on the same line
//     or on a line of its own), the result is that client;
//   - the result is always a valid, normalised address.
func FuzzAddr(f *testing.F) {
	for _, s := range []string{
		"", "1.2.3.4", "1.2.3.4, 5.6.7.8", "unknown", "[::1]:80", "::ffff:1.2.3.4",
		"fe80::1%eth0", ",,,", "for=1.2.3.4", `for="[2001:db8::1]:80"`, `for="`, `for="\`,
		`for="a, b";by=x`, "for=1.2.3.4;for=5.6.7.8", "10.0.0.9", "2001:db8:ffff::1", "\x00\xff",
		`"`, `\`, ";", "=", "for=", "FOR=1.1.1.1;proto=http", strings.Repeat("1.1.1.1,", 100),
	} {
		f.Add(s)
	}
	trusted, err := ParsePrefixes("10.0.0.0/8", "2001:db8:ffff::/48")
	if err != nil {
		f.Fatal(err)
	}
	xff := MustNew(Config{TrustedProxies: trusted})
	fwd := MustNew(Config{TrustedProxies: trusted, Header: Forwarded})
	real := MustNew(Config{TrustedProxies: trusted, Header: XRealIP})
	hops := MustNew(Config{TrustedHops: 1})
	clients := []string{"198.51.100.7", "2001:db8:1:2::7"}

	f.Fuzz(func(t *testing.T, evil string) {
		check := func(what string, r *Resolver, want string, peer string, hdrs ...string) {
			t.Helper()
			got, ok := r.Addr(req(peer, hdrs...))
			if !ok || got.String() != want {
				t.Fatalf("%s: Addr(%q) = %v, %v; want %s", what, hdrs, got, ok, want)
			}
			if got.Zone() != "" || got.Is4In6() {
				t.Fatalf("%s: %v not normalised", what, got)
			}
			if k := r.Key(req(peer, hdrs...)); k == "" || k == Unknown {
				t.Fatalf("%s: Key = %q", what, k)
			}
		}
		// Untrusted peer: headers are ignored whatever they hold.
		for _, r := range []*Resolver{xff, fwd, real} {
			check("untrusted", r, "203.0.113.5", "203.0.113.5:1", "X-Forwarded-For: "+evil, "Forwarded: "+evil, "X-Real-IP: "+evil)
		}
		for _, c := range clients {
			bracketed := c
			if strings.Contains(c, ":") {
				bracketed = `"[` + c + `]:4711"`
			}
			check("xff same line", xff, c, "10.0.0.1:1", "X-Forwarded-For: "+evil+", "+c)
			check("xff two proxies", xff, c, "10.0.0.1:1", "X-Forwarded-For: "+evil+", "+c+", 10.0.0.2")
			check("xff own line", xff, c, "10.0.0.1:1", "X-Forwarded-For: "+evil, "X-Forwarded-For: "+c)
			check("hops", hops, c, "10.0.0.1:1", "X-Forwarded-For: "+evil+","+c)
			check("forwarded same line", fwd, c, "10.0.0.1:1", "Forwarded: "+evil+", for="+bracketed)
			check("forwarded own line", fwd, c, "10.0.0.1:1", "Forwarded: "+evil, "Forwarded: for="+bracketed+";proto=https")
		}
		// Whatever a trusted proxy passes on, the result is an address
		// that is either in the text or a trusted hop, never made up.
		for _, r := range []*Resolver{xff, fwd, real, hops} {
			got, ok := r.Addr(req("10.0.0.1:1", r.header+": "+evil))
			if !ok || !got.IsValid() {
				t.Fatalf("Addr(%q) = %v, %v", evil, got, ok)
			}
			if got.String() != "10.0.0.1" && !r.isTrusted(got) && !mentions(evil, got) {
				t.Fatalf("Addr(%q) = %v, which the header does not hold", evil, got)
			}
		}
	})
}

// mentions reports whether text holds an address that parses to a.
func mentions(text string, a netip.Addr) bool {
	fields := strings.FieldsFunc(text, func(r rune) bool { return strings.ContainsRune(",;= \"\t", r) })
	for _, f := range fields {
		if b, ok := ParseAddr(strings.Trim(f, `\`)); ok && b == a {
			return true
		}
	}
	return false
}
