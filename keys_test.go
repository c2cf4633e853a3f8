package sluice_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// fw is the rule of the keys in the tests below.
var fw, _ = sluice.FixedWindow{Limit: 1, Window: 1e9}.Rule()

func TestKey(t *testing.T) {
	long := strings.Repeat("a", driver.MaxIdentityLen+1)
	for _, c := range []struct{ id, want string }{
		{"user:42", "rl:v1:api:fw2:{user:42}"},
		{"a{b}c", "rl:v1:api:fw2:{a%7Bb%7Dc}"},
		{"50% off", "rl:v1:api:fw2:{50%25%20off}"},
		{"#tag", "rl:v1:api:fw2:{%23tag}"},
		{"é", "rl:v1:api:fw2:{%C3%A9}"},
		{strings.Repeat("a", driver.MaxIdentityLen), "rl:v1:api:fw2:{" + strings.Repeat("a", driver.MaxIdentityLen) + "}"},
		{long, "rl:v1:api:fw2:{#" + "hash" + "}"},
	} {
		got := driver.Key("rl:v1", "api", fw, c.id)
		if c.id == long {
			if !strings.HasPrefix(got, "rl:v1:api:fw2:{#") || len(got) != len("rl:v1:api:fw2:{#}")+64 {
				t.Errorf("Key(long) = %q, want a SHA-256", got)
			}
			continue
		}
		if got != c.want {
			t.Errorf("Key(%q) = %q, want %q", c.id, got, c.want)
		}
	}
}

// hashTag returns the part of key a Valkey Cluster hashes.
func hashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}

// FuzzKey checks that distinct identities give distinct keys, that the
// identity is the whole hash tag, and that keys stay short.
func FuzzKey(f *testing.F) {
	for _, s := range [][2]string{
		{"a", "b"}, {"x_y", "x:y"}, {"{a}", "%7Ba%7D"}, {"a}b", "a%7Db"},
		{strings.Repeat("z", 200), strings.Repeat("z", 201)}, {"#ab", "%23ab"}, {"", " "},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, kb := driver.Key("rl:v1", "api", fw, a), driver.Key("rl:v1", "api", fw, b)
		if a != b && ka == kb {
			t.Fatalf("identities %q and %q share the key %q", a, b, ka)
		}
		// An empty identity (which Limiters refuse) has no hash tag.
		if want := ka[len("rl:v1:api:fw2:{") : len(ka)-1]; a != "" && hashTag(ka) != want {
			t.Fatalf("key %q: hash tag %q, want the whole identity %q", ka, hashTag(ka), want)
		}
		if len(ka) > len("rl:v1:api:fw2:{}")+driver.MaxIdentityLen {
			t.Fatalf("key %q is %d bytes long", ka, len(ka))
		}
	})
}

// FuzzIdentity checks that distinct part lists give distinct identities.
func FuzzIdentity(f *testing.F) {
	f.Add("x_y", "z", "x", "y_z")
	f.Add("a:b", "c", "a", "b:c")
	f.Add(`a\`, "b", "a", `\b`)
	f.Fuzz(func(t *testing.T, a1, a2, b1, b2 string) {
		if (a1 != b1 || a2 != b2) && sluice.Identity(a1, a2) == sluice.Identity(b1, b2) {
			t.Fatalf("(%q, %q) and (%q, %q) give the same identity %q", a1, a2, b1, b2, sluice.Identity(a1, a2))
		}
		if sluice.Identity(a1) == sluice.Identity(b1, b2) {
			t.Fatalf("(%q) and (%q, %q) give the same identity", a1, b1, b2)
		}
	})
}

// TestKeyBytes: identities are counted by their bytes: strings that are
// not UTF-8, and U+FFFD, which a decoder may make of them, give distinct
// keys, short and hashed alike.
func TestKeyBytes(t *testing.T) {
	long := strings.Repeat("x", driver.MaxIdentityLen)
	seen := map[string]string{}
	for _, id := range []string{"\xff", "\xfe", "\xc3", "\xed\xa0\x80", "\uFFFD", "\xef\xbf\xbd\xff", long + "\xff", long + "\xfe", long + "\uFFFD"} {
		k := driver.Key("p", "n", fw, id)
		if prev, dup := seen[k]; dup {
			t.Fatalf("identities %q and %q share the key %q", prev, id, k)
		}
		seen[k] = id
	}
}

// TestIdentity: parts without ':' or '\' are joined as they are; inside a
// part each is escaped with '\'.
func TestIdentity(t *testing.T) {
	for _, c := range []struct {
		parts []string
		want  string
	}{
		{[]string{"edge", "api_key", "key_abc"}, "edge:api_key:key_abc"},
		{[]string{"ip", "2001:db8::/64"}, `ip:2001\:db8\:\:/64`},
		{[]string{`a\b`, "c"}, `a\\b:c`},
		{[]string{"", ""}, ":"},
		{[]string{"x"}, "x"},
	} {
		if got := sluice.Identity(c.parts...); got != c.want {
			t.Errorf("Identity(%q) = %q, want %q", c.parts, got, c.want)
		}
	}
}
