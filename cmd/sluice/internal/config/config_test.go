package config

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

func TestDefaultMatchesExample(t *testing.T) {
	example, err := os.ReadFile("../../../../examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(example, defaultYAML) {
		t.Fatal("internal/config/default.yaml differs from examples/sluice.yaml: cp examples/sluice.yaml internal/config/default.yaml")
	}
	c, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	if c.Valkey != nil || c.Admin != nil {
		t.Error("the default must run without Valkey and without admin routes")
	}
	api := c.Policy("api")
	if api == nil || api.Algorithm != driver.AlgorithmTokenBucket || api.Limit != 20 || api.FailMode != sluice.FailOpen {
		t.Fatalf("api policy = %+v", api)
	}
	if api.Limiter != "api.token_bucket" {
		t.Errorf("api limiter name = %q", api.Limiter)
	}
	login := c.Policy("login")
	if login == nil || login.FailMode != sluice.FailClosed || login.Headers != HeadersRetryAfter {
		t.Fatalf("login policy = %+v", login)
	}
	if got := login.Policy.(sluice.SlidingLog); !got.CountRejected || got.Window != 15*time.Minute || got.Limit != 5 {
		t.Errorf("login = %+v", got)
	}
	if c.Domain("edge") == nil {
		t.Fatal("domain edge missing")
	}
}

func TestIssueShape(t *testing.T) {
	const y = `
policies: [{name: api, algorithm: token_bucket, burst: 20, rate: 5/s, on_failure: allow}, {name: login, algorithm: sliding_log, limit: 5, window: 15m, on_failure: deny, count_rejected: true}]
`
	c, err := Parse("x.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	tb := c.Policy("api").Policy.(sluice.TokenBucket)
	if tb != (sluice.TokenBucket{Capacity: 20, Rate: 5, Per: time.Second}) {
		t.Errorf("api = %+v", tb)
	}
	if w := c.Policy("api").Window(); w != 4*time.Second {
		t.Errorf("api window = %v, want 4s (20 tokens at 5/s)", w)
	}
}

func TestValkeySection(t *testing.T) {
	const y = `
valkey:
  addresses: [10.0.0.1:6379, 10.0.0.2:6379]
  username: sluice
  password_file: /run/secrets/valkey
  tls: {ca_file: /etc/ca.pem}
  timeout: 20ms
  connect_timeout: 1s
policies:
  - {name: a, algorithm: gcra, burst: 5, rate: 1/m}
  - {name: b, algorithm: fixed_window, limit: 5, window: 1d, timeout: 100ms}
`
	c, err := Parse("v.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	v := c.Valkey
	if len(v.Addresses) != 2 || v.Username != "sluice" || v.PasswordFile != "/run/secrets/valkey" ||
		v.TLS == nil || v.TLS.CAFile != "/etc/ca.pem" || v.Timeout != 20*time.Millisecond || v.ConnectTimeout != time.Second {
		t.Fatalf("valkey = %+v", v)
	}
	if c.Policy("a").Timeout != 20*time.Millisecond || c.Policy("b").Timeout != 100*time.Millisecond {
		t.Errorf("timeouts %v %v", c.Policy("a").Timeout, c.Policy("b").Timeout)
	}
	if c.Policy("b").Policy.(sluice.FixedWindow).Window != 24*time.Hour {
		t.Error("1d window")
	}
}

// TestSentinelSection: valkey.sentinel decodes with its own credentials.
func TestSentinelSection(t *testing.T) {
	c, err := Parse("s.yaml", []byte(`valkey:
  password_env: MASTER_PW
  sentinel:
    master_set: mymaster
    addresses: ["10.0.0.1:26379", "10.0.0.2:26379"]
    username: watcher
    password_env: SENTINEL_PW
policies:
  - {name: a, algorithm: gcra, burst: 5, rate: 5/s}
`))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Valkey.Sentinel
	if s == nil || s.MasterSet != "mymaster" || len(s.Addresses) != 2 || s.Username != "watcher" || len(c.Valkey.Addresses) != 0 {
		t.Fatalf("%+v %+v", c.Valkey, s)
	}
	pw, err := s.Password(func(k string) (string, bool) { return "pw-of-" + k, true })
	if err != nil || pw != "pw-of-SENTINEL_PW" {
		t.Errorf("sentinel password %q, %v", pw, err)
	}
	if _, err := s.Password(func(string) (string, bool) { return "", false }); err == nil || !strings.Contains(err.Error(), "SENTINEL_PW") {
		t.Errorf("unset variable: %v", err)
	}
}

func TestPasswordAndToken(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	os.WriteFile(pw, []byte("s3cret\n"), 0o600)
	v := &Valkey{PasswordFile: pw}
	if p, err := v.Password(nil); err != nil || p != "s3cret" {
		t.Errorf("password file: %q %v", p, err)
	}
	env := func(k string) (string, bool) {
		if k == "TOK" {
			return "0123456789abcdef", true
		}
		if k == "SHORT" {
			return "abc", true
		}
		return "", false
	}
	if tok, err := (&Admin{TokenEnv: "TOK"}).Token(env); err != nil || tok != "0123456789abcdef" {
		t.Errorf("token: %q %v", tok, err)
	}
	if _, err := (&Admin{TokenEnv: "SHORT"}).Token(env); err == nil {
		t.Error("short token accepted")
	}
	if _, err := (&Admin{TokenEnv: "MISSING"}).Token(env); err == nil {
		t.Error("missing env accepted")
	}
}

// TestErrors checks that bad files are refused with file:line and a clear
// message.
func TestErrors(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"unknown top", "polices: []\n", `bad.yaml:1:1: configuration: unknown field "polices" (did you mean "policies"?`},
		{"unknown policy field", "policies:\n  - name: a\n    algorithm: gcra\n    burst: 1\n    rate: 1/s\n    limt: 3\n", `bad.yaml:6:5: policy: unknown field "limt" (did you mean "limit"?`},
		{"bad algorithm", "policies:\n  - {name: a, algorithm: leaky, limit: 1, window: 1s}\n", `bad.yaml:2:26: policy "a": unknown algorithm "leaky"`},
		{"bad duration", "policies:\n  - name: a\n    algorithm: fixed_window\n    limit: 1\n    window: 10 minutes\n", `bad.yaml:5:13: window: duration "10 minutes" is not valid`},
		{"unitless duration", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 60}\n", `window: duration "60" has no unit`},
		{"zero limit", "policies:\n  - name: a\n    algorithm: fixed_window\n    limit: 0\n    window: 1s\n", `bad.yaml:4:12: limit must be between 1 and`},
		{"negative burst", "policies:\n  - {name: a, algorithm: gcra, burst: -1, rate: 1/s}\n", `burst must be between 1 and`},
		{"tiny window", "policies:\n  - {name: a, algorithm: sliding_window, limit: 5, window: 10us}\n", `window must be between 1ms and`},
		{"bad rate", "policies:\n  - {name: a, algorithm: token_bucket, burst: 5, rate: 5/fortnight}\n", `unknown unit "fortnight"`},
		{"rate too fast", "policies:\n  - {name: a, algorithm: token_bucket, burst: 5, rate: 5000000/s}\n", `more than one per microsecond`},
		{"sliding log too large", "policies:\n  - {name: a, algorithm: sliding_log, limit: 5000, window: 1m}\n", `SlidingLog.Limit must be at most 1000 (MaxSlidingLogLimit`},
		{"refill beyond a TTL", "policies:\n  - {name: a, algorithm: token_bucket, burst: 1000000, rate: 1/h}\n", `(the time to refill from empty, 1000000 × 1h0m0s) must be at most MaxWindow (9600h0m0s)`},
		{"gcra refill beyond a TTL", "policies:\n  - {name: a, algorithm: gcra, burst: 500, rate: 1/d}\n", `must be at most MaxWindow`},
		{"wrong field for algorithm", "policies:\n  - {name: a, algorithm: token_bucket, burst: 5, rate: 5/s, window: 1s}\n", `window is not used by token_bucket`},
		{"missing field", "policies:\n  - {name: a, algorithm: sliding_log, limit: 5}\n", `sliding_log needs window`},
		{"duplicate name", "policies:\n  - {name: a, algorithm: gcra, burst: 5, rate: 5/s}\n  - {name: a, algorithm: gcra, burst: 5, rate: 5/s}\n", `bad.yaml:3:12: policy name "a" is already used at line 2`},
		{"bad name", "policies:\n  - {name: 'a b', algorithm: gcra, burst: 5, rate: 5/s}\n", `may hold only letters`},
		{"on_failure", "policies:\n  - {name: a, algorithm: gcra, burst: 5, rate: 5/s, on_failure: maybe}\n", `on_failure must be allow, deny or share`},
		{"bool", "policies:\n  - {name: a, algorithm: gcra, burst: 5, rate: 5/s, shadow: maybe}\n", `shadow must be true or false`},
		{"headers", "policies:\n  - {name: a, algorithm: gcra, burst: 5, rate: 5/s, headers: [x-ratelimit, foo]}\n", `headers: unknown "foo"`},
		{"duplicate key", "policies: []\npolicies: []\n", `bad.yaml:2:1: configuration: "policies" is set twice`},
		{"empty", "", `bad.yaml: the file is empty`},
		{"nothing", "prefix: x\n", `no policies and no domains`},
		{"syntax", "policies:\n  - {name: a\n", `bad.yaml:`},
		{"two docs", "policies: []\n---\npolicies: []\n", `second YAML document`},
		{"valkey both passwords", "valkey: {address: 'h:1', password_env: A, password_file: B}\npolicies:\n  - {name: a, algorithm: gcra, burst: 5, rate: 5/s}\n", `password_env or password_file, not both`},
		{"valkey inline password", "valkey: {address: 'h:1', password: hunter2}\npolicies:\n  - {name: a, algorithm: gcra, burst: 5, rate: 5/s}\n", `unknown field "password"`},
		{"sentinel and addresses", "valkey: {address: 'h:1', sentinel: {master_set: m, addresses: ['s:1']}}\npolicies:\n  - {name: a, algorithm: gcra, burst: 5, rate: 5/s}\n", `set address(es) or sentinel, not both`},
		{"sentinel no master set", "valkey: {sentinel: {addresses: ['s:1']}}\npolicies:\n  - {name: a, algorithm: gcra, burst: 5, rate: 5/s}\n", `master_set is required`},
		{"sentinel no addresses", "valkey: {sentinel: {master_set: m}}\npolicies:\n  - {name: a, algorithm: gcra, burst: 5, rate: 5/s}\n", `addresses must list at least one Sentinel`},
		{"sentinel bad address", "valkey: {sentinel: {master_set: m, addresses: [nohost]}}\npolicies:\n  - {name: a, algorithm: gcra, burst: 5, rate: 5/s}\n", `must be host:port`},
		{"sentinel both passwords", "valkey: {sentinel: {master_set: m, addresses: ['s:1'], password_env: A, password_file: B}}\npolicies:\n  - {name: a, algorithm: gcra, burst: 5, rate: 5/s}\n", `valkey.sentinel: set password_env or password_file, not both`},
		{"sentinel unknown", "valkey: {sentinel: {master_set: m, addresses: ['s:1'], quorum: 2}}\npolicies:\n  - {name: a, algorithm: gcra, burst: 5, rate: 5/s}\n", `unknown field "quorum"`},
		{"admin inline", "admin: {token: abc}\npolicies:\n  - {name: a, algorithm: gcra, burst: 5, rate: 5/s}\n", `unknown field "token"`},
		{"envoy unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n", `bad.yaml:4:24: rate_limit: unknown unit "fortnight"`},
		{"envoy unknown", "domain: d\ndescriptors:\n  - key: k\n    rate_limt: {unit: second, requests_per_unit: 5}\n", `unknown field "rate_limt"`},
		{"envoy dup", "domain: d\ndescriptors:\n  - {key: k, value: v}\n  - {key: k, value: v}\n", `already defined at line 3`},
		{"envoy unknown policy", "policies:\n  - {name: a, algorithm: gcra, burst: 5, rate: 5/s}\ndomains:\n  - domain: d\n    descriptors:\n      - {key: k, policy: b}\n", `unknown policy "b"`},
		{"envoy replaces itself", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5, name: x, replaces: [{name: x}]}\n", `replaces names the limit itself`},
		{"envoy replaces empty", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5, replaces: [{name: ''}]}\n", `replaces entry needs a name`},
		{"envoy key wildcard", "domain: d\ndescriptors:\n  - key: 'k*'\n    rate_limit: {unit: second, requests_per_unit: 5}\n", `a '*' in a key is not supported`},
		{"envoy share_threshold", "domain: d\ndescriptors:\n  - {key: k, value: v, share_threshold: true, rate_limit: {unit: second, requests_per_unit: 5}}\n", `share_threshold applies only to a wildcard value`},
		{"envoy counting", "domain: d\ncounting: some\ndescriptors:\n  - {key: k, rate_limit: {unit: second, requests_per_unit: 5}}\n", `counting must be each or all_or_nothing`},
		{"in_flight without lease", "policies:\n  - {name: a, algorithm: in_flight, limit: 5}\n", `in_flight needs lease`},
		{"in_flight without limit", "policies:\n  - {name: a, algorithm: in_flight, lease: 30s}\n", `in_flight needs limit`},
		{"in_flight window", "policies:\n  - {name: a, algorithm: in_flight, limit: 5, lease: 30s, window: 1s}\n", `window is not used by in_flight`},
		{"in_flight plans", "policies:\n  - {name: a, algorithm: in_flight, limit: 5, lease: 30s, plans: {pro: {limit: 9}}}\n", `plans is not used by in_flight`},
		{"in_flight overrides", "policies:\n  - {name: a, algorithm: in_flight, limit: 5, lease: 30s, overrides: true}\n", `overrides is not used by in_flight`},
		{"in_flight deny_cache", "policies:\n  - {name: a, algorithm: in_flight, limit: 5, lease: 30s, deny_cache: true}\n", `deny_cache is not used by in_flight`},
		{"in_flight warn_at", "policies:\n  - {name: a, algorithm: in_flight, limit: 5, lease: 30s, warn_at: 80}\n", `warn_at is not used by in_flight`},
		{"in_flight deny_status", "policies:\n  - {name: a, algorithm: in_flight, limit: 5, lease: 30s, deny_status: 503}\n", `deny_status is not used by in_flight`},
		{"in_flight too large", "policies:\n  - {name: a, algorithm: in_flight, limit: 20000, lease: 30s}\n", `at most 10000 (MaxInFlightLimit)`},
		{"lease on a rate policy", "policies:\n  - {name: a, algorithm: gcra, burst: 5, rate: 5/s, lease: 30s}\n", `lease is not used by gcra`},
		{"in_flight in envoy", "policies:\n  - {name: a, algorithm: in_flight, limit: 5, lease: 30s}\ndomains:\n  - domain: d\n    descriptors:\n      - {key: k, policy: a}\n", `policy "a" is in_flight`},
		{"in_flight in forward auth", "policies:\n  - {name: a, algorithm: in_flight, limit: 5, lease: 30s}\nforward_auth:\n  trusted_proxies: [127.0.0.1]\n  routes:\n    - limits: [{policy: a, key: client_ip}]\n", `policy "a" is in_flight`},
		{"envoy unlimited unit", "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unlimited: true, unit: second}}\n", `unit makes no sense with unlimited`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("bad.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatalf("accepted: %+v", c)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error:\n%v\nwant it to contain:\n%s", err, tc.want)
			}
		})
	}
}

// TestInFlightPolicy: algorithm in_flight with limit and lease.
func TestInFlightPolicy(t *testing.T) {
	c, err := Parse("ok.yaml", []byte("policies:\n  - {name: exports, algorithm: in_flight, limit: 20, lease: 30s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Policy("exports")
	if p.Policy != (sluice.InFlight{Limit: 20, Lease: 30 * time.Second}) || p.DenyCache {
		t.Fatalf("policy %+v, deny cache %v", p.Policy, p.DenyCache)
	}
}

func TestParseRate(t *testing.T) {
	good := map[string]struct {
		n   float64
		per time.Duration
	}{
		"5/s": {5, time.Second}, "100/m": {100, time.Minute}, "1000/h": {1000, time.Hour},
		"20000/d": {20000, 24 * time.Hour}, "0.5/s": {0.5, time.Second}, " 3 / minute ": {3, time.Minute},
	}
	for s, want := range good {
		n, per, err := ParseRate(s)
		if err != nil || n != want.n || per != want.per {
			t.Errorf("ParseRate(%q) = %v, %v, %v", s, n, per, err)
		}
	}
	for _, s := range []string{"", "5", "5/", "/s", "-1/s", "0/s", "NaN/s", "inf/s", "1e3/s", "5/w", "5/s/s"} {
		if _, _, err := ParseRate(s); err == nil {
			t.Errorf("ParseRate(%q) accepted", s)
		}
	}
}

func TestParseDuration(t *testing.T) {
	good := map[string]time.Duration{"50ms": 50 * time.Millisecond, "15m": 15 * time.Minute, "7d": 7 * 24 * time.Hour, "1h30m": 90 * time.Minute}
	for s, want := range good {
		if d, err := ParseDuration(s); err != nil || d != want {
			t.Errorf("ParseDuration(%q) = %v, %v", s, d, err)
		}
	}
	for _, s := range []string{"", "10", "1.5d", "d", "-1d", "10 minutes", "99999999d"} {
		if _, err := ParseDuration(s); err == nil {
			t.Errorf("ParseDuration(%q) accepted", s)
		}
	}
}

// TestEnvoyFormat reads a file in envoyproxy/ratelimit's format unchanged.
func TestEnvoyFormat(t *testing.T) {
	const y = `
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
    shadow_mode: true
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 10
    descriptors:
      - key: path
        value: /foo
        rate_limit: {unit: hour, requests_per_unit: 5, unit_multiplier: 2}
  - key: client_id
    value: "tenant-*"
    share_threshold: true
    rate_limit: {unit: day, requests_per_unit: 100, name: tenant_quota}
  - key: internal
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
    detailed_metric: true
`
	c, err := Parse("ratelimit.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	dom := c.Domain("mongo_cps")
	if dom == nil {
		t.Fatal("no domain")
	}
	cases := []struct {
		entries   []Entry
		window    time.Duration
		limit     int64
		shadow    bool
		unlimited bool
		deny      bool
		none      bool
		matched   string
	}{
		{entries: []Entry{{"database", "users"}}, window: time.Second, limit: 500},
		{entries: []Entry{{"database", "default"}}, window: time.Second, limit: 500, shadow: true},
		{entries: []Entry{{"database", "other"}}, none: true},
		{entries: []Entry{{"remote_address", "10.0.0.1"}}, window: time.Minute, limit: 10, matched: "10.0.0.1"},
		{entries: []Entry{{"remote_address", "10.0.0.1"}, {"path", "/foo"}}, window: 2 * time.Hour, limit: 5},
		{entries: []Entry{{"remote_address", "10.0.0.1"}, {"path", "/bar"}}, none: true},
		{entries: []Entry{{"remote_address", "10.0.0.1"}, {"path", "/foo"}, {"x", "y"}}, none: true},
		{entries: []Entry{{"client_id", "tenant-42"}}, window: 24 * time.Hour, limit: 100, matched: "tenant-*"},
		{entries: []Entry{{"internal", "x"}}, unlimited: true},
		{entries: []Entry{{"blocked", "x"}}, deny: true},
		{entries: nil, none: true},
	}
	for _, tc := range cases {
		node, matched := dom.Match(tc.entries)
		if tc.none {
			if node != nil {
				t.Errorf("%v matched %+v", tc.entries, node)
			}
			continue
		}
		if node == nil {
			t.Errorf("%v matched nothing", tc.entries)
			continue
		}
		if node.Unlimited != tc.unlimited || node.Deny != tc.deny || node.Shadow != tc.shadow {
			t.Errorf("%v: node %+v", tc.entries, node)
		}
		if tc.matched != "" && matched[0].Value != tc.matched {
			t.Errorf("%v: matched %v", tc.entries, matched)
		}
		if tc.unlimited || tc.deny {
			continue
		}
		p := c.Policy(node.Policy)
		fw := p.Policy.(sluice.FixedWindow)
		if fw.Window != tc.window || fw.Limit != tc.limit || p.Shadow != tc.shadow || !p.Envoy {
			t.Errorf("%v: policy %+v", tc.entries, p)
		}
	}
	if c.Policy("tenant_quota") == nil {
		t.Error("rate_limit name not used as the policy name")
	}
	if c.Policy("mongo_cps.database_users") == nil {
		var names []string
		for _, p := range c.Policies {
			names = append(names, p.Name)
		}
		t.Errorf("readable names: %v", names)
	}
}

func TestAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		b.WriteString("a" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [")
		for j := 0; j < 10; j++ {
			b.WriteString("*a" + string(rune('0'+i-1)) + ",")
		}
		b.WriteString("]\n")
	}
	b.WriteString("policies: *a8\n")
	start := time.Now()
	_, err := Parse("bomb.yaml", []byte(b.String()))
	if err == nil {
		t.Fatal("accepted")
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("took %v", time.Since(start))
	}
}

func FuzzParse(f *testing.F) {
	f.Add(defaultYAML)
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n"))
	f.Add([]byte("policies:\n  - {name: a, algorithm: gcra, burst: 5, rate: 5/s}\n"))
	f.Add([]byte("valkey: {addresses: ['a:1']}\npolicies: [{name: x, algorithm: fixed_window, limit: 3, window: 1s}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data)
		if err != nil {
			if c != nil {
				t.Fatal("config returned with an error")
			}
			if !strings.HasPrefix(err.Error(), "fuzz.yaml") {
				t.Fatalf("error without file name: %v", err)
			}
			return
		}
		for _, p := range c.Policies {
			if _, err := p.Policy.Rule(); err != nil {
				t.Fatalf("accepted invalid policy %s: %v", p.Name, err)
			}
			if len(p.Limiter) > 64 {
				t.Fatalf("limiter name too long: %q", p.Limiter)
			}
		}
	})
}
