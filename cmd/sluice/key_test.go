package main

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
)

// TestIdentityOf: identityOf undoes sluice.Key's escaping for any key
// short enough to be kept verbatim, and says so for a long key's digest.
func TestIdentityOf(t *testing.T) {
	rule := sluice.Rule{Algorithm: sluice.AlgorithmFixedWindow, Limit: 1, Window: 60e9}
	alphabet := []byte("ab:%{}# \\\x00\x7f\xc3\xa9-/")
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		id := string(b)
		sk := sluice.Key("rl:v1", "api.fixed_window", rule, id)
		parts := strings.SplitN(strings.TrimPrefix(sk, "rl:v1:"), ":", 3)
		got, ok := identityOf(parts[2])
		long := strings.Contains(sk, "{#")
		if ok == long || ok && got != id {
			t.Fatalf("identityOf(%q) = %q %v, want %q (long %v)", parts[2], got, ok, id, long)
		}
	}
	if _, ok := identityOf("{#" + strings.Repeat("ab", 32) + "}"); ok {
		t.Error("a long key's digest taken for the key")
	}
}

// TestFlagsAfterArguments: flags may follow positional arguments; "--"
// ends the flags.
func TestFlagsAfterArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		json bool
		pos  []string
	}{
		{[]string{"--json", "a", "b"}, true, []string{"a", "b"}},
		{[]string{"a", "b", "--json"}, true, []string{"a", "b"}},
		{[]string{"a", "--json", "b"}, true, []string{"a", "b"}},
		{[]string{"a", "--", "--json", "-x"}, false, []string{"a", "--json", "-x"}},
		{[]string{"a", "b"}, false, []string{"a", "b"}},
	} {
		fs := newFlags("t")
		j := fs.Bool("json", false, "")
		code, ok := parseFlags(fs, "", tc.args, nil, nil)
		if !ok || code != 0 || *j != tc.json || !slices.Equal(fs.Args(), tc.pos) {
			t.Errorf("%q: ok %v json %v args %q, want json %v args %q", tc.args, ok, *j, fs.Args(), tc.json, tc.pos)
		}
	}
	var errb strings.Builder
	fs := newFlags("t")
	fs.Bool("json", false, "")
	if code, ok := parseFlags(fs, "", []string{"a", "--frob"}, nil, &errb); ok || code != 2 || !strings.Contains(errb.String(), "frob") {
		t.Errorf("a bad flag after an argument: %d %v %q", code, ok, errb.String())
	}
}
