package config

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// TestPolicyNameLength: the longest policy name the configuration takes
// makes, with every algorithm, a limiter name the library takes (the two
// limits agree), and one character more is refused at load.
func TestPolicyNameLength(t *testing.T) {
	for _, alg := range []string{"fixed_window", "sliding_log", "sliding_window", "token_bucket", "gcra"} {
		name := strings.Repeat("n", maxPolicyName)
		params := "limit: 5, window: 1s"
		if alg == "token_bucket" || alg == "gcra" {
			params = "burst: 5, rate: 5/s"
		}
		y := fmt.Sprintf("policies:\n  - {name: %s, algorithm: %s, %s}\n", name, alg, params)
		c, err := Parse("x.yaml", []byte(y))
		if err != nil {
			t.Fatalf("%s, a name of %d: %v", alg, len(name), err)
		}
		p := c.Policy(name)
		if _, err := sluice.New(memstore.New(), p.Policy, sluice.WithName(p.Limiter)); err != nil {
			t.Fatalf("%s: the limiter of a policy the configuration took: %v", alg, err)
		}
		y = fmt.Sprintf("policies:\n  - {name: %sn, algorithm: %s, %s}\n", name, alg, params)
		if _, err := Parse("x.yaml", []byte(y)); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("must be 1 to %d characters", maxPolicyName)) {
			t.Fatalf("%s, a name of %d: %v, want it refused", alg, len(name)+1, err)
		}
	}
	// The library's own bound is the one the configuration leaves room in.
	if maxPolicyName+len(".sliding_window") != sluice.MaxNameLength || maxPolicyName < 48 {
		t.Fatalf("maxPolicyName %d", maxPolicyName)
	}
}

// TestOnFailureWords: on_failure takes the documented allow and deny, and
// nothing else (open and closed once passed quietly).
func TestOnFailureWords(t *testing.T) {
	for word, want := range map[string]sluice.FailMode{"allow": sluice.FailOpen, "deny": sluice.FailClosed} {
		c, err := Parse("x.yaml", []byte("policies:\n  - {name: a, algorithm: gcra, burst: 5, rate: 5/s, on_failure: "+word+"}\n"))
		if err != nil || c.Policy("a").FailMode != want {
			t.Fatalf("on_failure: %s: %v", word, err)
		}
	}
	for _, word := range []string{"closed", "open", "Allow", "fail_open"} {
		_, err := Parse("x.yaml", []byte("policies:\n  - {name: a, algorithm: gcra, burst: 5, rate: 5/s, on_failure: "+word+"}\n"))
		if err == nil || !strings.Contains(err.Error(), "on_failure must be allow, deny or share (with grants), got \""+word+"\"") {
			t.Fatalf("on_failure: %s: %v, want it refused", word, err)
		}
	}
}

// TestPolicyErrorsOnce: a policy error in the configuration reads its
// reason once, without the library's "sluice: invalid policy" prefix.
func TestPolicyErrorsOnce(t *testing.T) {
	for _, y := range []string{
		"policies:\n  - {name: a, algorithm: sliding_window, limit: 5, window: 10us}\n",
		"policies:\n  - {name: a, algorithm: token_bucket, burst: 5, rate: 5000000/s}\n",
		"policies:\n  - {name: a, algorithm: sliding_log, limit: 5000, window: 1m}\n",
	} {
		_, err := Parse("x.yaml", []byte(y))
		if err == nil || strings.Contains(err.Error(), "sluice:") || strings.Contains(err.Error(), "invalid policy") {
			t.Errorf("%q: %v, want the reason alone", y, err)
		}
	}
}

// TestPolicyNameDots: "." and ".." are refused as policy names (they make
// an odd path segment in GET /v1/forward-auth/nginx/refused/{policy} and
// the other URLs naming a policy); other names of dots are names, and the
// schema's pattern agrees with the decoder on each.
func TestPolicyNameDots(t *testing.T) {
	pattern := regexp.MustCompile(policyNamePattern)
	for name, ok := range map[string]bool{".": false, "..": false, "...": true, ".a": true, "a.": true, "..a": true, "a..": true, "_": true, "-.": true} {
		_, err := Parse("x.yaml", []byte(fmt.Sprintf("policies:\n  - {name: '%s', algorithm: gcra, burst: 5, rate: 5/s}\n", name)))
		if ok != (err == nil) {
			t.Errorf("policy name %q: %v, want accepted %v", name, err, ok)
		}
		if !ok && err != nil && !strings.Contains(err.Error(), `"." and ".." are not names`) {
			t.Errorf("policy name %q: %v, want the reason", name, err)
		}
		if pattern.MatchString(name) != ok {
			t.Errorf("policy name %q: the schema's pattern says %v", name, !ok)
		}
	}
	if !pattern.MatchString(strings.Repeat("n", maxPolicyName)) || pattern.MatchString(strings.Repeat("n", maxPolicyName+1)) ||
		!pattern.MatchString(".."+strings.Repeat("n", maxPolicyName-2)) || pattern.MatchString(".."+strings.Repeat("n", maxPolicyName-1)) {
		t.Errorf("the pattern's length bound")
	}
}
