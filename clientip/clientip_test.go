package clientip

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

func mustPrefixes(t testing.TB, ss ...string) []netip.Prefix {
	t.Helper()
	ps, err := ParsePrefixes(ss...)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// req builds a request from peer with the given header lines.
func req(peer string, headers ...string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = peer
	for _, h := range headers {
		name, value, _ := strings.Cut(h, ": ")
		r.Header.Add(name, value)
	}
	return r
}

func TestAddr(t *testing.T) {
	proxies := Config{TrustedProxies: mustPrefixes(t, "10.0.0.0/8", "2001:db8:ffff::/48")}
	forwarded := proxies
	forwarded.Header = Forwarded
	realIP := proxies
	realIP.Header = XRealIP
	cf := proxies
	cf.Header = CFConnectingIP
	hops2 := Config{TrustedHops: 2}

	tests := []struct {
		name string
		cfg  Config
		peer string
		hdrs []string
		want string // "" means ok is false
	}{
		// No proxy configured: headers never count.
		{"peer only", Config{}, "198.51.100.7:5555", nil, "198.51.100.7"},
		{"spoofed XFF, no proxies", Config{}, "198.51.100.7:5555", []string{"X-Forwarded-For: 1.2.3.4"}, "198.51.100.7"},
		{"spoofed Forwarded, no proxies", Config{}, "198.51.100.7:5555", []string{"Forwarded: for=1.2.3.4"}, "198.51.100.7"},
		{"ipv6 peer", Config{}, "[2001:db8::1]:443", nil, "2001:db8::1"},
		{"ipv4-mapped peer", Config{}, "[::ffff:192.0.2.9]:443", nil, "192.0.2.9"},
		{"zoned peer", Config{}, "[fe80::1%eth0]:443", nil, "fe80::1"},
		{"unix socket peer", Config{}, "@", nil, ""},
		{"empty peer", Config{}, "", nil, ""},

		// Spoofing from an untrusted peer.
		{"untrusted peer, XFF", proxies, "198.51.100.7:1", []string{"X-Forwarded-For: 1.2.3.4"}, "198.51.100.7"},
		{"untrusted peer, trusted-looking XFF", proxies, "198.51.100.7:1", []string{"X-Forwarded-For: 10.0.0.5"}, "198.51.100.7"},
		{"untrusted peer, X-Real-IP", realIP, "198.51.100.7:1", []string{"X-Real-IP: 1.2.3.4"}, "198.51.100.7"},
		{"untrusted peer, CF", cf, "198.51.100.7:1", []string{"CF-Connecting-IP: 1.2.3.4"}, "198.51.100.7"},
		{"untrusted v6 peer next to proxy net", proxies, "[2001:db8:fffe::1]:1", []string{"X-Forwarded-For: 1.2.3.4"}, "2001:db8:fffe::1"},

		// Trusted proxy: right-most untrusted hop.
		{"one proxy", proxies, "10.0.0.1:1", []string{"X-Forwarded-For: 198.51.100.7"}, "198.51.100.7"},
		{"client prepends a lie", proxies, "10.0.0.1:1", []string{"X-Forwarded-For: 1.2.3.4, 198.51.100.7"}, "198.51.100.7"},
		{"client prepends a trusted lie", proxies, "10.0.0.1:1", []string{"X-Forwarded-For: 10.9.9.9, 198.51.100.7"}, "198.51.100.7"},
		{"two proxies", proxies, "10.0.0.1:1", []string{"X-Forwarded-For: 1.2.3.4, 198.51.100.7, 10.0.0.2"}, "198.51.100.7"},
		{"v6 proxies", proxies, "[2001:db8:ffff::1]:1", []string{"X-Forwarded-For: 2001:db8:1:2::99, 2001:db8:ffff::2"}, "2001:db8:1:2::99"},
		{"several header lines", proxies, "10.0.0.1:1", []string{"X-Forwarded-For: 1.2.3.4", "X-Forwarded-For: 198.51.100.7, 10.0.0.3"}, "198.51.100.7"},
		{"lie on first of several lines", proxies, "10.0.0.1:1", []string{"X-Forwarded-For: 198.51.100.99", "X-Forwarded-For: 198.51.100.7"}, "198.51.100.7"},
		{"ports and brackets", proxies, "10.0.0.1:1", []string{"X-Forwarded-For: [2001:db8::5]:4711, 192.0.2.1:80"}, "192.0.2.1"},
		{"mapped in header", proxies, "10.0.0.1:1", []string{"X-Forwarded-For: ::ffff:192.0.2.1"}, "192.0.2.1"},
		{"mapped proxy in header is trusted", proxies, "10.0.0.1:1", []string{"X-Forwarded-For: 192.0.2.1, ::ffff:10.1.1.1"}, "192.0.2.1"},
		{"zone in header", proxies, "10.0.0.1:1", []string{"X-Forwarded-For: fe80::7%eth0"}, "fe80::7"},
		{"empty elements ignored", proxies, "10.0.0.1:1", []string{"X-Forwarded-For: ,198.51.100.7,, "}, "198.51.100.7"},
		{"no header from proxy", proxies, "10.0.0.1:1", nil, "10.0.0.1"},
		{"all hops trusted", proxies, "10.0.0.1:1", []string{"X-Forwarded-For: 10.0.0.9, 10.0.0.8"}, "10.0.0.9"},
		{"garbage right of client stops at proxy", proxies, "10.0.0.1:1", []string{"X-Forwarded-For: 198.51.100.7, bogus"}, "10.0.0.1"},
		{"garbage after trusted hop", proxies, "10.0.0.1:1", []string{"X-Forwarded-For: bogus, 10.0.0.2"}, "10.0.0.2"},
		{"unknown", proxies, "10.0.0.1:1", []string{"X-Forwarded-For: unknown"}, "10.0.0.1"},
		{"unspecified", proxies, "10.0.0.1:1", []string{"X-Forwarded-For: 0.0.0.0"}, "10.0.0.1"},
		{"attacker key in garbage", proxies, "10.0.0.1:1", []string{"X-Forwarded-For: 198.51.100.7 evil"}, "10.0.0.1"},
		{"Forwarded ignored unless configured", proxies, "10.0.0.1:1", []string{"Forwarded: for=1.2.3.4", "X-Forwarded-For: 198.51.100.7"}, "198.51.100.7"},

		// RFC 7239 Forwarded.
		{"forwarded", forwarded, "10.0.0.1:1", []string{"Forwarded: for=198.51.100.7;proto=https"}, "198.51.100.7"},
		{"forwarded quoted v6", forwarded, "10.0.0.1:1", []string{`Forwarded: for="[2001:db8:cafe::17]:4711"`}, "2001:db8:cafe::17"},
		{"forwarded case", forwarded, "10.0.0.1:1", []string{"Forwarded: For=198.51.100.7"}, "198.51.100.7"},
		{"forwarded chain", forwarded, "10.0.0.1:1", []string{"Forwarded: for=1.2.3.4, for=198.51.100.7;by=10.0.0.1, for=10.0.0.2"}, "198.51.100.7"},
		{"forwarded lines", forwarded, "10.0.0.1:1", []string{"Forwarded: for=1.2.3.4", "Forwarded: for=198.51.100.7"}, "198.51.100.7"},
		{"forwarded XFF ignored", forwarded, "10.0.0.1:1", []string{"X-Forwarded-For: 1.2.3.4", "Forwarded: for=198.51.100.7"}, "198.51.100.7"},
		{"forwarded obfuscated", forwarded, "10.0.0.1:1", []string{"Forwarded: for=_hidden"}, "10.0.0.1"},
		{"forwarded unknown", forwarded, "10.0.0.1:1", []string{"Forwarded: for=unknown"}, "10.0.0.1"},
		{"forwarded no for", forwarded, "10.0.0.1:1", []string{"Forwarded: proto=https"}, "10.0.0.1"},
		{"forwarded two fors", forwarded, "10.0.0.1:1", []string{"Forwarded: for=1.2.3.4;for=198.51.100.7"}, "10.0.0.1"},
		{"forwarded quoted comma lie", forwarded, "10.0.0.1:1", []string{`Forwarded: for="1.2.3.4, x";by=a, for=198.51.100.7`}, "198.51.100.7"},
		{"forwarded open quote swallows nothing", forwarded, "10.0.0.1:1", []string{`Forwarded: for="1.2.3.4, for=198.51.100.7`}, "198.51.100.7"},
		{"forwarded open quote, v6 proxy element", forwarded, "10.0.0.1:1", []string{`Forwarded: for="x, for="[2001:db8::7]"`}, "2001:db8::7"},
		{"forwarded escaped quote", forwarded, "10.0.0.1:1", []string{`Forwarded: for="a\", for=1.2.3.4", for=198.51.100.7`}, "198.51.100.7"},
		{"forwarded bad pair", forwarded, "10.0.0.1:1", []string{"Forwarded: for=198.51.100.7;junk"}, "10.0.0.1"},

		// Single-address headers.
		{"x-real-ip", realIP, "10.0.0.1:1", []string{"X-Real-IP: 198.51.100.7"}, "198.51.100.7"},
		{"x-real-ip ignores XFF", realIP, "10.0.0.1:1", []string{"X-Real-IP: 198.51.100.7", "X-Forwarded-For: 1.2.3.4"}, "198.51.100.7"},
		{"x-real-ip list refused", realIP, "10.0.0.1:1", []string{"X-Real-IP: 1.2.3.4, 198.51.100.7"}, "10.0.0.1"},
		{"x-real-ip two lines refused", realIP, "10.0.0.1:1", []string{"X-Real-IP: 1.2.3.4", "X-Real-IP: 198.51.100.7"}, "10.0.0.1"},
		{"x-real-ip garbage", realIP, "10.0.0.1:1", []string{"X-Real-IP: nope"}, "10.0.0.1"},
		{"cf-connecting-ip", cf, "10.0.0.1:1", []string{"CF-Connecting-IP: 2001:db8::9"}, "2001:db8::9"},
		{"x-real-ip absent", realIP, "10.0.0.1:1", nil, "10.0.0.1"},

		// Hop count: the peer is the nearest of 2 proxies.
		{"hops exact", hops2, "203.0.113.1:1", []string{"X-Forwarded-For: 198.51.100.7, 203.0.113.2"}, "198.51.100.7"},
		{"hops lie", hops2, "203.0.113.1:1", []string{"X-Forwarded-For: 1.2.3.4, 198.51.100.7, 203.0.113.2"}, "198.51.100.7"},
		{"hops short chain", hops2, "203.0.113.1:1", []string{"X-Forwarded-For: 203.0.113.2"}, "203.0.113.2"},
		{"hops no header", hops2, "203.0.113.1:1", nil, "203.0.113.1"},
		{"hops garbage", hops2, "203.0.113.1:1", []string{"X-Forwarded-For: 1.2.3.4, junk, 203.0.113.2"}, "203.0.113.2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := r.Addr(req(tt.peer, tt.hdrs...))
			if tt.want == "" {
				if ok {
					t.Fatalf("Addr = %v, true; want not ok", got)
				}
				if k := r.Key(req(tt.peer, tt.hdrs...)); k != Unknown {
					t.Fatalf("Key = %q, want %q", k, Unknown)
				}
				return
			}
			if !ok || got != netip.MustParseAddr(tt.want) {
				t.Fatalf("Addr = %v, %v; want %s", got, ok, tt.want)
			}
			if got.Zone() != "" || got.Is4In6() {
				t.Fatalf("Addr = %v is not normalised", got)
			}
		})
	}
}

func TestKey(t *testing.T) {
	def := MustNew(Config{})
	tests := []struct {
		r    *Resolver
		peer string
		want string
	}{
		{def, "192.0.2.7:1", "192.0.2.7"},
		{def, "[::ffff:192.0.2.7]:1", "192.0.2.7"},
		{def, "[2001:db8:1:2:3:4:5:6]:1", "2001:db8:1:2::/64"},
		{def, "[2001:db8:1:2:ffff::1]:1", "2001:db8:1:2::/64"},
		{def, "[fe80::1%eth0]:1", "fe80::/64"},
		{def, "@", Unknown},
		{MustNew(Config{IPv6Prefix: 128}), "[2001:db8::6]:1", "2001:db8::6"},
		{MustNew(Config{IPv6Prefix: 48}), "[2001:db8:1:2::6]:1", "2001:db8:1::/48"},
		{MustNew(Config{IPv4Prefix: 24}), "192.0.2.7:1", "192.0.2.0/24"},
	}
	for _, tt := range tests {
		if got := tt.r.Key(req(tt.peer)); got != tt.want {
			t.Errorf("Key(%s) = %q, want %q", tt.peer, got, tt.want)
		}
	}
}

func TestNewErrors(t *testing.T) {
	bad := []Config{
		{TrustedHops: -1},
		{TrustedHops: 1, TrustedProxies: mustPrefixes(t, "10.0.0.0/8")},
		{Header: XRealIP},
		{Header: "CF-Connecting-IP", TrustedHops: 1},
		{IPv6Prefix: 129},
		{IPv6Prefix: -1},
		{IPv4Prefix: 33},
		{TrustedProxies: []netip.Prefix{{}}},
	}
	for _, cfg := range bad {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

func TestParsePrefixes(t *testing.T) {
	ps, err := ParsePrefixes("10.1.2.3/8", " 192.0.2.1 ", "::ffff:172.16.0.0/108", "2001:db8::1", "")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/8", "192.0.2.1/32", "172.16.0.0/12", "2001:db8::1/128"}
	if len(ps) != len(want) {
		t.Fatalf("got %v", ps)
	}
	for i := range want {
		if ps[i].String() != want[i] {
			t.Errorf("prefix %d = %v, want %s", i, ps[i], want[i])
		}
	}
	for _, s := range []string{"10.0.0.0/33", "nope", "1.2.3.4/x"} {
		if _, err := ParsePrefixes(s); err == nil {
			t.Errorf("ParsePrefixes(%q) succeeded", s)
		}
	}
	// A mapped trusted prefix trusts the plain IPv4 peer.
	r := MustNew(Config{TrustedProxies: mustPrefixes(t, "::ffff:10.0.0.0/104")})
	if got, _ := r.Addr(req("10.0.0.1:1", "X-Forwarded-For: 198.51.100.7")); got.String() != "198.51.100.7" {
		t.Errorf("mapped trusted prefix: Addr = %v", got)
	}
	if !MustNew(Config{TrustedProxies: PrivateNetworks()}).isTrusted(netip.MustParseAddr("fd00::1")) {
		t.Error("PrivateNetworks does not hold fd00::1")
	}
}

func TestLongHeaderBounded(t *testing.T) {
	r := MustNew(Config{TrustedProxies: mustPrefixes(t, "10.0.0.0/8")})
	long := strings.Repeat("10.0.0.9,", 10000) + "10.0.0.8"
	// Every hop is trusted: the left-most of the last maxHops read.
	if got, _ := r.Addr(req("10.0.0.1:1", "X-Forwarded-For: 1.2.3.4,"+long)); got.String() != "10.0.0.9" {
		t.Errorf("Addr = %v, want 10.0.0.9", got)
	}
	fr := MustNew(Config{TrustedProxies: mustPrefixes(t, "10.0.0.0/8"), Header: Forwarded})
	longF := strings.Repeat("for=10.0.0.9,", 10000)
	if got, _ := fr.Addr(req("10.0.0.1:1", "Forwarded: for=1.2.3.4,"+longF+"for=198.51.100.7")); got.String() != "198.51.100.7" {
		t.Errorf("Addr = %v, want 198.51.100.7", got)
	}
}

func BenchmarkAddr(b *testing.B) {
	r := MustNew(Config{TrustedProxies: PrivateNetworks()})
	q := req("10.0.0.1:1", "X-Forwarded-For: 1.2.3.4, 198.51.100.7, 10.0.0.2")
	b.ReportAllocs()
	for b.Loop() {
		if a, _ := r.Addr(q); a.String() != "198.51.100.7" {
			b.Fatal(a)
		}
	}
}
