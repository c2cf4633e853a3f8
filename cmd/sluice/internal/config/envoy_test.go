package config

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestEnvoyWildcards: middle and multiple '*' match as envoyproxy/ratelimit
// matches them, exact values first, wildcards in file order, the key alone
// last; share_threshold counts every matching value under the pattern.
func TestEnvoyWildcards(t *testing.T) {
	y := `
domain: edge
descriptors:
  - key: path
    value: /v1/users
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /v1/*/action
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    value: "/v1/*/x/*/y"
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: path
    value: /v1/*
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: tenant
    value: "*-prod"
    share_threshold: true
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 6}
`
	c, err := Parse("w.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	dom := c.Domain("edge")
	cases := []struct {
		entries []Entry
		limit   int64
		matched []Entry
	}{
		{[]Entry{{"path", "/v1/users"}}, 1, nil},
		{[]Entry{{"path", "/v1/abc/action"}}, 2, []Entry{{"path", "/v1/abc/action"}}},
		{[]Entry{{"path", "/v1//action"}}, 2, nil},
		{[]Entry{{"path", "/v1/a/x/b/y"}}, 3, []Entry{{"path", "/v1/*/x/*/y"}}},
		{[]Entry{{"path", "/v1/a/x/b/y/z"}}, 4, nil},
		{[]Entry{{"path", "/v1/abc/actions"}}, 4, nil},
		{[]Entry{{"path", "/v2"}}, 5, nil},
		{[]Entry{{"tenant", "a-prod"}, {"user", "u1"}}, 6, []Entry{{"tenant", "*-prod"}, {"user", "u1"}}},
		{[]Entry{{"tenant", "a-dev"}, {"user", "u1"}}, 0, nil},
	}
	for _, tc := range cases {
		node, matched := dom.Match(tc.entries)
		if tc.limit == 0 {
			if node != nil {
				t.Errorf("%v matched %+v", tc.entries, node)
			}
			continue
		}
		if node == nil {
			t.Errorf("%v matched nothing", tc.entries)
			continue
		}
		if got := c.Policy(node.Policy).Limit; got != tc.limit {
			t.Errorf("%v: limit %d, want %d", tc.entries, got, tc.limit)
		}
		if tc.matched != nil && !equalEntries(matched, tc.matched) {
			t.Errorf("%v: counted as %v, want %v", tc.entries, matched, tc.matched)
		}
	}
}

func equalEntries(a, b []Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestWildcardMatchModel compares wildcardMatch with a regular expression
// built from the pattern, on random patterns and values over a small
// alphabet.
func TestWildcardMatchModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alpha := "ab*"
	gen := func(n int, chars string) string {
		var b strings.Builder
		for range rng.IntN(n) {
			b.WriteByte(chars[rng.IntN(len(chars))])
		}
		return b.String()
	}
	for range 20000 {
		pat := gen(7, alpha)
		val := gen(8, "ab")
		parts := strings.Split(pat, "*")
		quoted := make([]string, len(parts))
		for i, p := range parts {
			quoted[i] = regexp.QuoteMeta(p)
		}
		want := regexp.MustCompile("^" + strings.Join(quoted, ".*") + "$").MatchString(val)
		if got := wildcardMatch(parts, val); got != want {
			t.Fatalf("pattern %q value %q: got %v, want %v", pat, val, got, want)
		}
	}
}

// TestEnvoyAnswersFromConfig: the generated policy keeps the rate_limit as
// written (name, unit, multiplier), requests_per_unit: 0 keeps its unit and
// name, and envoyproxy/ratelimit's format counts each descriptor's hits,
// refused ones included, while sluice's own domains are all-or-nothing.
func TestEnvoyAnswersFromConfig(t *testing.T) {
	c, err := Parse("a.yaml", []byte(`
domain: d
descriptors:
  - {key: a, rate_limit: {unit: month, requests_per_unit: 7, name: monthly}}
  - {key: b, rate_limit: {unit: year, requests_per_unit: 0, name: never}}
  - {key: c, rate_limit: {unlimited: true, requests_per_unit: 9}}
`))
	if err != nil {
		t.Fatal(err)
	}
	dom := c.Domain("d")
	if dom.Counting != CountEach {
		t.Errorf("envoy format counting %v", dom.Counting)
	}
	a, _ := dom.Match([]Entry{{"a", "x"}})
	p := c.Policy(a.Policy)
	if p.EnvoyLimit.Name != "monthly" || p.EnvoyLimit.Unit != "MONTH" || p.EnvoyLimit.Window != 30*24*time.Hour {
		t.Errorf("a: %+v", p.EnvoyLimit)
	}
	if fw := p.Policy.(sluice.FixedWindow); !fw.CountRejected {
		t.Errorf("a: %+v does not count refused hits", fw)
	}
	b, _ := dom.Match([]Entry{{"b", "x"}})
	if !b.Deny || b.Limit.Name != "never" || b.Limit.Unit != "YEAR" {
		t.Errorf("b: %+v %+v", b, b.Limit)
	}
	if cc, _ := dom.Match([]Entry{{"c", "x"}}); !cc.Unlimited {
		t.Errorf("c: %+v", cc)
	}
	s, err := Parse("s.yaml", []byte(`
domains:
  - domain: d
    descriptors:
      - {key: a, rate_limit: {unit: second, requests_per_unit: 7}}
  - domain: e
    counting: each
    descriptors:
      - {key: a, rate_limit: {unit: second, requests_per_unit: 7}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if s.Domain("d").Counting != CountAllOrNothing || s.Domain("e").Counting != CountEach {
		t.Errorf("sluice format counting: %v %v", s.Domain("d").Counting, s.Domain("e").Counting)
	}
}

// TestYAML11: merge keys, yes/no booleans and empty values read as
// envoyproxy/ratelimit's YAML 1.1 parser reads them, and errors inside a
// merged mapping keep their position.
func TestYAML11(t *testing.T) {
	c, err := Parse("m.yaml", []byte(`
domain: d
descriptors:
  - key: a
    value:
    shadow_mode: yes
    rate_limit: &base {unit: minute, requests_per_unit: 5}
  - key: b
    rate_limit:
      <<: *base
      requests_per_unit: 9
  - key: c
    shadow_mode: off
    rate_limit:
    descriptors:
`))
	if err != nil {
		t.Fatal(err)
	}
	dom := c.Domain("d")
	a, _ := dom.Match([]Entry{{"a", "x"}})
	if a == nil || !a.Shadow || c.Policy(a.Policy).Limit != 5 {
		t.Fatalf("a: %+v", a)
	}
	b, _ := dom.Match([]Entry{{"b", "x"}})
	if b == nil || b.Limit.Unit != "MINUTE" || b.Limit.RequestsPerUnit != 9 {
		t.Fatalf("b: %+v", b)
	}
	if cc, _ := dom.Match([]Entry{{"c", "x"}}); cc == nil || cc.Policy != "" || cc.Shadow {
		t.Fatalf("c: %+v", cc)
	}
	_, err = Parse("m.yaml", []byte("domain: d\nbase: &b {unit: minute, requests_per_unit: x}\n"))
	if err == nil || !strings.Contains(err.Error(), `unknown field "base"`) {
		t.Fatalf("unknown top-level anchor holder: %v", err)
	}
	_, err = Parse("m.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: &x {unit: minute, requests_per_unit: lots}\n  - key: b\n    rate_limit: {<<: *x}\n"))
	if err == nil || !strings.Contains(err.Error(), "m.yaml:4:") {
		t.Fatalf("error in merged mapping: %v", err)
	}
}
