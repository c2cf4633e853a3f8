package main

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// TestIdentityOf: identityOf undoes driver.Key's escaping for any key
// short enough to be kept verbatim, and says so for a long key's digest.
func TestIdentityOf(t *testing.T) {
	rule := sluice.Rule{Algorithm: driver.AlgorithmFixedWindow, Limit: 1, Window: 60e9}
	alphabet := []byte("ab:%{}# \\\x00\x7f\xc3\xa9-/")
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		id := string(b)
		sk := driver.Key("rl:v1", "api.fixed_window", rule, id)
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

// TestKeyCommandExits: sluice key's exit codes and messages for each kind
// of source and each misuse, on the embedded example configuration.
func TestKeyCommandExits(t *testing.T) {
	noEnv := func(string) (string, bool) { return "", false }
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string // a line stdout has
		stderr string // what stderr says
	}{
		{[]string{"key", "k1"}, 0, "key        k1\n", ""},
		{[]string{"envoy", "edge", "api_key=abc"}, 0, "policy     api\n", ""},
		{[]string{"key", ""}, 2, "", "sluice key: key takes one non-empty KEY\n"},
		{[]string{"key", "a", "b"}, 2, "", "key takes one non-empty KEY"},
		{[]string{"envoy", "edge"}, 2, "", "envoy takes a DOMAIN and at least one KEY=VALUE entry"},
		{[]string{"envoy", "nowhere", "a=b"}, 2, "", `sluice key: unknown domain "nowhere": `},
		{[]string{"envoy", "edge", "=b"}, 2, "", `entry "=b": want KEY=VALUE`},
		{[]string{"envoy", "edge", "path=/healthz"}, 1, "", "sluice key: the descriptor is counted by no policy: unlimited"},
		{[]string{"client_ip", "a", "b"}, 2, "", "client_ip takes one VALUE"},
		{[]string{"bogus", "x"}, 2, "", "(or key, or envoy)"},
	} {
		var out, errb strings.Builder
		code := runKey(context.Background(), tc.args, noEnv, &out, &errb)
		if code != tc.code || !strings.Contains(out.String(), tc.stdout) || !strings.Contains(errb.String(), tc.stderr) || (tc.stderr == "") != (errb.Len() == 0) {
			t.Errorf("sluice key %q: exit %d, stdout %q, stderr %q; want %d, %q, %q", tc.args, code, out.String(), errb.String(), tc.code, tc.stdout, tc.stderr)
		}
	}
}
