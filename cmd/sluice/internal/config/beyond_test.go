package config

import (
	"strings"
	"testing"
	"time"
)

// beyondBad are policies whose warn_at, warning_header, ... are refused at
// load, each with the words the error must hold (the field's name first).
var beyondBad = []struct{ name, policy, want string }{
	{"warn_at zero", "warn_at: 0", "warn_at must be between 1 and 99"},
	{"warn_at 100", "warn_at: 100", "warn_at must be between 1 and 99"},
	{"warn_at a percent sign", "warn_at: 80%", "warn_at must be a whole number"},
	{"warning_header alone", "warning_header: true", "warning_header needs warn_at"},
	{"deny_status 200", "deny_status: 200", "deny_status must be between 400 and 599"},
	{"deny_status text", "deny_status: busy", "deny_status must be a whole number"},
	{"deny_body a string", "deny_body: busy", "deny_body must be a mapping"},
	{"deny_body a list", "deny_body: [a]", "deny_body must be a mapping"},
	{"wait zero", "wait: 0s", "wait must be"},
	{"wait over a minute", "wait: 61s", "wait must be"},
	{"wait a number", "wait: 2", "wait"},
	{"deny_status on a shadow policy", "shadow: true, deny_status: 503", "deny_status cannot apply with shadow: true"},
	{"deny_body on a shadow policy", "shadow: true, deny_body: {a: b}", "deny_body cannot apply with shadow: true"},
	{"wait on a shadow policy", "shadow: true, wait: 1s", "wait cannot apply with shadow: true"},
}

// TestBeyondRefused: each bad field is refused at load, naming it.
func TestBeyondRefused(t *testing.T) {
	for _, tc := range beyondBad {
		y := "policies:\n  - {name: p, algorithm: fixed_window, limit: 10, window: 1m, " + tc.policy + "}\n"
		_, err := Parse("bad.yaml", []byte(y))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// TestBeyondDecoded: the fields land in Policy.
func TestBeyondDecoded(t *testing.T) {
	c, err := Parse("ok.yaml", []byte("policies:\n  - {name: p, algorithm: gcra, burst: 10, rate: 1/s, warn_at: 80, warning_header: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Policy("p"); p.WarnAt != 80 || !p.WarningHeader || p.DenyStatus != 0 || p.DenyBody != nil {
		t.Fatalf("%+v", p)
	}
	c, err = Parse("ok.yaml", []byte("policies:\n  - {name: p, algorithm: gcra, burst: 10, rate: 1/s, deny_status: 503, deny_body: {error: busy, n: [1, 2]}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Policy("p"); p.DenyStatus != 503 || string(p.DenyBody) != `{"error":"busy","n":[1,2]}` {
		t.Fatalf("%d %s", p.DenyStatus, p.DenyBody)
	}
}

// TestBeyondEnvoyRefused: a descriptor may not use a policy whose
// deny_status, deny_body or warning_header Envoy's answers cannot carry;
// warn_at alone is accepted.
func TestBeyondEnvoyRefused(t *testing.T) {
	for _, tc := range []struct{ fields, want string }{
		{"deny_status: 503", "deny_status and deny_body do not apply to Envoy"},
		{"deny_body: {a: b}", "deny_status and deny_body do not apply to Envoy"},
		{"warn_at: 80, warning_header: true", "warning_header does not apply to Envoy"},
		{"warn_at: 80", ""},
	} {
		y := "policies:\n  - {name: p, algorithm: gcra, burst: 5, rate: 5/s, " + tc.fields + "}\ndomains:\n  - domain: d\n    descriptors:\n      - {key: k, policy: p}\n"
		_, err := Parse("envoy.yaml", []byte(y))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.fields, err, tc.want)
		}
	}
}

// TestWaitConfig: wait lands in Policy and the bounds in Config (their
// defaults when absent); wait is refused with count_rejected, on
// in_flight and on a policy an Envoy descriptor uses, and the bounds
// without a policy that waits, each naming the field.
func TestWaitConfig(t *testing.T) {
	c, err := Parse("ok.yaml", []byte("policies:\n  - {name: p, algorithm: gcra, burst: 10, rate: 1/s, wait: 2s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Policy("p").Wait != 2*time.Second || c.MaxWaiting != 1000 || c.MaxWaitingPerKey != 10 {
		t.Fatalf("%v %d %d", c.Policy("p").Wait, c.MaxWaiting, c.MaxWaitingPerKey)
	}
	c, err = Parse("ok.yaml", []byte("max_waiting: 5\nmax_waiting_per_key: 2\npolicies:\n  - {name: p, algorithm: gcra, burst: 10, rate: 1/s, wait: 2s}\n"))
	if err != nil || c.MaxWaiting != 5 || c.MaxWaitingPerKey != 2 {
		t.Fatalf("%v %+v", err, c)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"policies:\n  - {name: p, algorithm: sliding_log, limit: 5, window: 1m, count_rejected: true, wait: 1s}\n", "wait cannot apply with count_rejected"},
		{"policies:\n  - {name: p, algorithm: in_flight, limit: 5, lease: 1m, wait: 1s}\n", "wait is not used by in_flight"},
		{"policies:\n  - {name: p, algorithm: gcra, burst: 5, rate: 5/s, wait: 1s}\ndomains:\n  - domain: d\n    descriptors:\n      - {key: k, policy: p}\n", "wait does not apply to Envoy"},
		{"max_waiting: 5\npolicies:\n  - {name: p, algorithm: gcra, burst: 5, rate: 5/s}\n", "max_waiting bounds the requests waiting for admission, but no policy sets wait"},
		{"max_waiting_per_key: 5\npolicies:\n  - {name: p, algorithm: gcra, burst: 5, rate: 5/s}\n", "max_waiting_per_key bounds"},
		{"max_waiting: 0\npolicies:\n  - {name: p, algorithm: gcra, burst: 5, rate: 5/s, wait: 1s}\n", "max_waiting must be"},
	} {
		if _, err := Parse("bad.yaml", []byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
