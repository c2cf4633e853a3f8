package config

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// grantsBad are policies with grants refused at load, each with the words
// the error must hold: the field's name and the reason.
var grantsBad = []struct{ name, policy, want string }{
	{"sliding_window", "{name: p, algorithm: sliding_window, limit: 10, window: 1m, grants: auto}", "grants: grants cannot keep sliding_window's guarantee"},
	{"sliding_log", "{name: p, algorithm: sliding_log, limit: 10, window: 1m, grants: auto}", "grants: grants cannot keep sliding_log's guarantee"},
	{"in_flight", "{name: p, algorithm: in_flight, limit: 10, lease: 1m, grants: auto}", "grants: grants are shares of a rate"},
	{"plans", "{name: p, algorithm: gcra, burst: 10, rate: 1/s, grants: auto, plans: {pro: {burst: 20}}}", "plans cannot apply with grants: a grant is a share of one limit"},
	{"overrides", "{name: p, algorithm: gcra, burst: 10, rate: 1/s, grants: auto, overrides: true}", "overrides cannot apply with grants"},
	{"max_debt", "{name: p, algorithm: fixed_window, limit: 10, window: 1m, grants: auto, max_debt: 5}", "max_debt cannot apply with grants: reservations"},
	{"warn_at", "{name: p, algorithm: token_bucket, burst: 10, rate: 1/s, grants: auto, warn_at: 80}", "warn_at cannot apply with grants"},
	{"penalty", "{name: p, algorithm: token_bucket, burst: 10, rate: 1/s, grants: auto, penalty: {after: 3, within: 1m, block: 1m}}", "penalty cannot apply with grants"},
	{"deny_cache", "{name: p, algorithm: gcra, burst: 10, rate: 1/s, grants: auto, deny_cache: true}", "deny_cache: true cannot apply with grants"},
	{"a bad word", "{name: p, algorithm: gcra, burst: 10, rate: 1/s, grants: yes}", "grants must be auto or off"},
	{"life in microseconds", "{name: p, algorithm: gcra, burst: 10, rate: 1/s, grants: auto, grant_life: 1500500us}", "grants: Life must be a whole number of milliseconds"},
	{"life too short", "{name: p, algorithm: gcra, burst: 10, rate: 1/s, grants: auto, grant_life: 5ms}", "grant_life must be"},
	{"period above life / 2", "{name: p, algorithm: gcra, burst: 10, rate: 1/s, grants: auto, grant_life: 2s, grant_period: 1500ms}", "grants: Period must be from 1ms to Life / 2"},
	{"max keys zero", "{name: p, algorithm: gcra, burst: 10, rate: 1/s, grants: auto, grant_max_keys: 0}", "grant_max_keys must be between 1"},
	{"tuning without grants", "{name: p, algorithm: gcra, burst: 10, rate: 1/s, grant_life: 3s}", "grant_life tunes grants: set grants: auto"},
	{"share without grants", "{name: p, algorithm: gcra, burst: 10, rate: 1/s, on_failure: share}", "on_failure: share decides on the process's share of its grants: set grants: auto"},
	{"share with grants off", "{name: p, algorithm: gcra, burst: 10, rate: 1/s, grants: off, on_failure: share}", "set grants: auto"},
}

// TestGrantsRefused: each is refused at load, naming the field and why.
func TestGrantsRefused(t *testing.T) {
	for _, tc := range grantsBad {
		_, err := Parse("bad.yaml", []byte("policies:\n  - "+tc.policy+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// TestGrantsDecoded: grants: auto and its tuning fields land in Policy,
// the deny cache is off by default with grants, on_failure: share is
// sluice.FailShare, and sluice.New takes the limiter the policy makes.
func TestGrantsDecoded(t *testing.T) {
	y := "policies:\n" +
		"  - {name: a, algorithm: gcra, burst: 100, rate: 50/s, grants: auto, grant_life: 3s, grant_period: 500ms, grant_max_keys: 50, on_failure: share}\n" +
		"  - {name: b, algorithm: fixed_window, limit: 100, window: 1m, grants: auto}\n" +
		"  - {name: c, algorithm: token_bucket, burst: 10, rate: 1/s, grants: off}\n"
	c, err := Parse("ok.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	a := c.Policy("a")
	want := sluice.GrantOptions{Life: 3 * time.Second, Period: 500 * time.Millisecond, MaxKeys: 50}
	if !a.Grants || a.GrantOptions != want || a.FailMode != sluice.FailShare || a.DenyCache {
		t.Fatalf("a: %+v", a)
	}
	if b := c.Policy("b"); !b.Grants || b.GrantOptions != (sluice.GrantOptions{}) || b.DenyCache {
		t.Fatalf("b: %+v", b)
	}
	if p := c.Policy("c"); p.Grants || !p.DenyCache {
		t.Fatalf("c: %+v", p)
	}
}

// TestGrantsEnvoyAndForwardAuth: a descriptor of a domain counting
// all_or_nothing, and a forward_auth route, cannot use a policy with
// grants (both decide their limits together); a domain counting each can.
func TestGrantsEnvoyAndForwardAuth(t *testing.T) {
	pol := "policies:\n  - {name: hot, algorithm: gcra, burst: 100, rate: 100/s, grants: auto}\n"
	for _, tc := range []struct{ yaml, want string }{
		{"domains:\n  - domain: d\n    descriptors: [{key: k, policy: hot}]\n", "counting all_or_nothing would have it give back"},
		{"domains:\n  - domain: d\n    counting: all_or_nothing\n    descriptors: [{key: k, policy: hot}]\n", "set counting: each"},
		{"domains:\n  - domain: d\n    counting: each\n    descriptors: [{key: k, policy: hot}]\n", ""},
		{"forward_auth:\n  trusted_proxies: [127.0.0.1/32]\n  routes: [{limits: [{policy: hot, key: client_ip}]}]\n", "policy \"hot\" has grants: a route's limits are decided all or none"},
	} {
		_, err := Parse("x.yaml", []byte(pol+tc.yaml))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

// TestGrantsSchema: docs/sluice.schema.json accepts the policies with
// grants the decoder takes, and refuses those of grantsBad it can express.
func TestGrantsSchema(t *testing.T) {
	schema := compiledSchema(t)
	ok := "policies:\n  - {name: a, algorithm: gcra, burst: 100, rate: 50/s, grants: auto, grant_life: 3s, grant_period: 500ms, grant_max_keys: 50, on_failure: share, deny_cache: false}\n"
	if _, err := Parse("ok.yaml", []byte(ok)); err != nil {
		t.Fatal(err)
	}
	if err := schema.Validate(asJSON(t, []byte(ok))); err != nil {
		t.Fatalf("the schema refuses %s: %v", ok, err)
	}
	n := 0
	for _, tc := range grantsBad {
		if tc.name == "life in microseconds" || tc.name == "life too short" || tc.name == "period above life / 2" {
			continue // the decoder only: durations are strings to the schema
		}
		n++
		y := []byte("policies:\n  - " + tc.policy + "\n")
		if err := schema.Validate(asJSON(t, y)); err == nil {
			t.Errorf("%s: the schema accepts it", tc.name)
		}
	}
	if n < 12 {
		t.Fatalf("only %d cases", n)
	}
}
