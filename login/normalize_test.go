package login

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/memstore"
)

// defaultIgnorableRanges is the Default_Ignorable_Code_Point property as
// listed in Unicode 15.0's DerivedCoreProperties.txt (the Unicode version
// of the standard library and golang.org/x/text in use), copied range by
// range: the reference isDefaultIgnorable's derivation is checked against.
var defaultIgnorableRanges = [][2]rune{
	{0x00AD, 0x00AD}, {0x034F, 0x034F}, {0x061C, 0x061C}, {0x115F, 0x1160},
	{0x17B4, 0x17B5}, {0x180B, 0x180D}, {0x180E, 0x180E}, {0x180F, 0x180F},
	{0x200B, 0x200F}, {0x202A, 0x202E}, {0x2060, 0x2064}, {0x2065, 0x2065},
	{0x2066, 0x206F}, {0x3164, 0x3164}, {0xFE00, 0xFE0F}, {0xFEFF, 0xFEFF},
	{0xFFA0, 0xFFA0}, {0xFFF0, 0xFFF8}, {0x1BCA0, 0x1BCA3}, {0x1D173, 0x1D17A},
	{0xE0000, 0xE0000}, {0xE0001, 0xE0001}, {0xE0002, 0xE001F}, {0xE0020, 0xE007F},
	{0xE0080, 0xE00FF}, {0xE0100, 0xE01EF}, {0xE01F0, 0xE0FFF},
}

func inDefaultIgnorableRanges(r rune) bool {
	for _, rg := range defaultIgnorableRanges {
		if rg[0] <= r && r <= rg[1] {
			return true
		}
	}
	return false
}

func TestDefaultIgnorableIsTheWholeSet(t *testing.T) {
	n := 0
	for r := rune(0); r <= utf8.MaxRune; r++ {
		want := inDefaultIgnorableRanges(r)
		if got := isDefaultIgnorable(r); got != want {
			t.Errorf("isDefaultIgnorable(%U) = %v, Unicode says %v", r, got, want)
		}
		if want {
			n++
		}
	}
	if n != 4174 {
		t.Errorf("%d default-ignorable code points, Unicode 15.0 has 4174", n)
	}
}

func TestNormalizeRemovesIgnorables(t *testing.T) {
	for _, s := range []string{
		"al\u200Bice", "\u00ADalice", "alice\uFEFF", "a\u2060lice", "ali\u200Dce",
		"alice\U000E0041", "ali\uFE0Fce", "al\u034Fice", "\u3164alice", "alic\u180Ee",
		"ＡＬ\u00ADＩＣＥ", "\u200B Alice \u200B",
	} {
		if got := Normalize(s); got != "alice" {
			t.Errorf("Normalize(%q) = %q, want \"alice\"", s, got)
		}
	}
}

// A locked-out account cannot be attacked again under a spelling that
// differs only by invisible code points.
func TestIgnorableSpellingsShareABudget(t *testing.T) {
	g, _ := newGuard(t, memstore.New(), Config{PerUsername: sluice.SlidingLog{Limit: 2, Window: time.Minute}})
	ctx := context.Background()
	for i, user := range []string{"alice@example.com", "alice@exa\u200Bmple.com"} {
		if v, err := g.Attempt(ctx, user, ip("192.0.2.1")); err != nil || !v.Allowed {
			t.Fatalf("attempt %d: %+v %v", i, v, err)
		}
	}
	for _, user := range []string{"\uFEFFalice@example.com", "al\u00ADice@example.com", "alice@example\u2060.com", "ALICE@EXAMPLE.COM\U000E0001"} {
		v, err := g.Attempt(ctx, user, ip("192.0.2.2"))
		if err != nil || v.Allowed || v.Tripped != TrippedUsername {
			t.Errorf("%q after the lockout: %+v %v", user, v, err)
		}
	}
}

// The per-address limit is per address: the port of r.RemoteAddr never
// reaches the key, and IPv6 addresses of one /64 share a budget.
func TestPerAddressIgnoresPortsAndGroupsIPv6(t *testing.T) {
	g, _ := newGuard(t, memstore.New(), Config{PerAddress: sluice.SlidingLog{Limit: 2, Window: time.Minute}})
	attempt := func(peer, user string) Verdict {
		t.Helper()
		r := httptest.NewRequest("POST", "/login", nil)
		r.RemoteAddr = peer
		v, err := g.AttemptRequest(r, user)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		peers []string
	}{
		{[]string{"192.0.2.1:1000", "192.0.2.1:1001", "192.0.2.1:1002"}},
		{[]string{"[2001:db8:1:2::1]:5", "[2001:db8:1:2::ffff]:6", "[2001:db8:1:2:aaaa::3]:7"}},
		{[]string{"[::ffff:198.51.100.1]:80", "198.51.100.1:81", "198.51.100.1:82"}},
	} {
		for i, peer := range c.peers {
			v := attempt(peer, "user"+peer)
			if v.Allowed != (i < 2) || (!v.Allowed && v.Tripped != TrippedAddress) {
				t.Errorf("attempt %d from %s: %+v", i, peer, v)
			}
		}
	}
	// Another /64, another budget; and Attempt with a parsed address
	// counts under the same key as AttemptRequest.
	if v := attempt("[2001:db8:1:3::1]:5", "x"); !v.Allowed {
		t.Errorf("another /64 refused: %+v", v)
	}
	if v, err := g.Attempt(context.Background(), "y", ip("192.0.2.1")); err != nil || v.Allowed {
		t.Errorf("Attempt with the parsed address of an exhausted client: %+v %v", v, err)
	}
	// ResetAddress clears the whole group.
	if err := g.ResetAddress(context.Background(), ip("2001:db8:1:2::42")); err != nil {
		t.Fatal(err)
	}
	if v := attempt("[2001:db8:1:2::1]:5", "z"); !v.Allowed {
		t.Errorf("after ResetAddress of the /64: %+v", v)
	}
	// A peer without an address is refused loudly, not counted as "".
	r := httptest.NewRequest("POST", "/login", nil)
	r.RemoteAddr = "@"
	if _, err := g.AttemptRequest(r, "alice"); !errors.Is(err, ErrNoClientAddr) {
		t.Errorf("unix socket peer: %v", err)
	}
}

// The guard's resolver finds the client behind a trusted proxy.
func TestAttemptRequestBehindProxy(t *testing.T) {
	res, err := clientip.New(clientip.Config{TrustedProxies: clientip.PrivateNetworks()})
	if err != nil {
		t.Fatal(err)
	}
	g, _ := newGuard(t, memstore.New(), Config{ClientIP: res, PerAddress: sluice.SlidingLog{Limit: 1, Window: time.Minute}})
	for i, peer := range []string{"10.0.0.1:1", "10.0.0.2:2"} {
		r := httptest.NewRequest("POST", "/login", nil)
		r.RemoteAddr = peer
		r.Header.Set("X-Forwarded-For", "203.0.113.9")
		v, err := g.AttemptRequest(r, "u"+peer)
		if err != nil || v.Allowed != (i == 0) {
			t.Errorf("attempt %d through %s: %+v %v", i, peer, v, err)
		}
	}
}

// FuzzNormalize checks that Normalize is idempotent, leaves no
// default-ignorable code point, and is blind to an ignorable inserted
// anywhere.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{
		"alice", "Alice@Example.COM", "Straße", "ＡＤＭＩＮ", "cafe\u0301", "\u00ADx", "a\u200B",
		"\uFFA0", "ﬃ", "ǅ", "\u0345", "ΐ", "\xff\xfe", " \u0301", "\u1E9E", "İ",
	} {
		f.Add(s, uint(1), uint(0))
	}
	ignorables := []rune{0x200B, 0x00AD, 0xFEFF, 0x2060, 0x034F, 0xFE0F, 0xE0041, 0x180E, 0x3164, 0xFFA0, 0x1D173}
	f.Fuzz(func(t *testing.T, s string, at, which uint) {
		n := Normalize(s)
		if again := Normalize(n); again != n {
			t.Fatalf("not idempotent: %q → %q → %q", s, n, again)
		}
		if i := strings.IndexFunc(n, isDefaultIgnorable); i >= 0 {
			t.Fatalf("Normalize(%q) = %q keeps an ignorable at byte %d", s, n, i)
		}
		// Insert an ignorable at a rune boundary of the valid form.
		v := []rune(strings.ToValidUTF8(s, "\uFFFD"))
		i := int(at % uint(len(v)+1))
		w := string(v[:i]) + string(ignorables[which%uint(len(ignorables))]) + string(v[i:])
		if got := Normalize(w); got != n {
			t.Fatalf("Normalize(%q) = %q but Normalize(%q) = %q", s, n, w, got)
		}
	})
}
