package envoy

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/driver"
)

func envWith(kv ...string) map[string]string {
	m := map[string]string{"RUNTIME_ROOT": "/rt", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379"}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// TestPerSecondEnv: REDIS_PERSECOND=true reads the per-second Valkey from
// REDIS_PERSECOND_*, as upstream's settings name them: single, cluster or
// sentinel, its own password and Sentinel password, TLS with the shared
// REDIS_TLS_* files, its own timeout; bad values are refused under the
// per-second names.
func TestPerSecondEnv(t *testing.T) {
	e, err := ReadEnv(mapEnv(envWith("REDIS_PERSECOND", "true", "REDIS_PERSECOND_SOCKET_TYPE", "tcp", "REDIS_PERSECOND_URL", "ps:6380",
		"REDIS_PERSECOND_AUTH", "u:psw", "REDIS_AUTH", "mainpw", "REDIS_PERSECOND_TLS", "true", "REDIS_TLS_CACERT", "/ca.pem",
		"REDIS_PERSECOND_TIMEOUT", "300ms", "REDIS_PERSECOND_POOL_SIZE", "4")))
	if err != nil {
		t.Fatal(err)
	}
	ps := e.PerSecond
	if ps == nil || len(ps.Addresses) != 1 || ps.Addresses[0] != "ps:6380" || ps.Username != "u" || ps.TLS == nil || ps.TLS.CAFile != "/ca.pem" || ps.Timeout != 300*time.Millisecond {
		t.Fatalf("per-second: %+v", ps)
	}
	if e.Valkey.TLS != nil || e.Valkey.Addresses[0] != "r:6379" {
		t.Errorf("the main Valkey changed: %+v", e.Valkey)
	}
	if pw, err := ps.Password(e.LookupEnv); err != nil || pw != "psw" {
		t.Errorf("per-second password %q %v", pw, err)
	}
	if pw, err := e.Valkey.Password(e.LookupEnv); err != nil || pw != "mainpw" {
		t.Errorf("main password %q %v", pw, err)
	}
	if !strings.Contains(strings.Join(e.Notes, " "), "REDIS_PERSECOND_POOL_SIZE") {
		t.Errorf("REDIS_PERSECOND_POOL_SIZE not noted: %v", e.Notes)
	}

	e, err = ReadEnv(mapEnv(envWith("REDIS_PERSECOND", "true", "REDIS_PERSECOND_SOCKET_TYPE", "tcp", "REDIS_PERSECOND_TYPE", "cluster",
		"REDIS_PERSECOND_URL", "c1:7000,c2:7001")))
	if err != nil || len(e.PerSecond.Addresses) != 2 || e.PerSecond.Sentinel != nil {
		t.Fatalf("cluster: %+v %v", e, err)
	}
	e, err = ReadEnv(mapEnv(envWith("REDIS_PERSECOND", "true", "REDIS_PERSECOND_SOCKET_TYPE", "tcp", "REDIS_PERSECOND_TYPE", "SENTINEL",
		"REDIS_PERSECOND_URL", "psmaster,s1:26379", "REDIS_PERSECOND_SENTINEL_AUTH", "spw", "REDIS_SENTINEL_AUTH", "other")))
	if err != nil {
		t.Fatal(err)
	}
	if s := e.PerSecond.Sentinel; s == nil || s.MasterSet != "psmaster" || len(s.Addresses) != 1 || s.PasswordEnv != "REDIS_PERSECOND_SENTINEL_AUTH" {
		t.Errorf("sentinel: %+v", e.PerSecond.Sentinel)
	}

	for _, c := range []struct {
		kv   []string
		want string
	}{
		{[]string{"REDIS_PERSECOND_SOCKET_TYPE", "tcp"}, "REDIS_PERSECOND_URL"},
		{[]string{"REDIS_PERSECOND_URL", "ps:1"}, "REDIS_PERSECOND_SOCKET_TYPE"},
		{[]string{"REDIS_PERSECOND_SOCKET_TYPE", "tcp", "REDIS_PERSECOND_URL", "ps:1", "REDIS_PERSECOND_TYPE", "proxy"}, "REDIS_PERSECOND_TYPE"},
		{[]string{"REDIS_PERSECOND_SOCKET_TYPE", "tcp", "REDIS_PERSECOND_URL", "a:1,b:2"}, "REDIS_PERSECOND_TYPE=single"},
		{[]string{"REDIS_PERSECOND_SOCKET_TYPE", "tcp", "REDIS_PERSECOND_URL", "nohost"}, "REDIS_PERSECOND_URL"},
		{[]string{"REDIS_PERSECOND_SOCKET_TYPE", "tcp", "REDIS_PERSECOND_URL", "ps:1", "REDIS_PERSECOND_TIMEOUT", "2h"}, "REDIS_PERSECOND_TIMEOUT"},
		{[]string{"REDIS_PERSECOND_SOCKET_TYPE", "tcp", "REDIS_PERSECOND_URL", "ps:1", "REDIS_PERSECOND_TLS", "yes please"}, "REDIS_PERSECOND_TLS"},
		{[]string{"REDIS_PERSECOND_SOCKET_TYPE", "tcp", "REDIS_PERSECOND_URL", "ps:1", "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "ERROR"}, "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR"},
	} {
		_, err := ReadEnv(mapEnv(envWith(append([]string{"REDIS_PERSECOND", "true"}, c.kv...)...)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %s", c.kv, err, c.want)
		}
	}

	// Not enabled: no second Valkey, and its variables are said unused.
	e, err = ReadEnv(mapEnv(envWith("REDIS_PERSECOND_URL", "ps:1")))
	if err != nil || e.PerSecond != nil || !strings.Contains(strings.Join(e.Notes, " "), "REDIS_PERSECOND_URL=ps:1 is not used") {
		t.Errorf("REDIS_PERSECOND unset: %+v %v", e, err)
	}
}

// TestEnvTimeouts: the envoyproxy/ratelimit limits of a directory decide
// within REDIS_TIMEOUT, and the per-second ones within
// REDIS_PERSECOND_TIMEOUT; a policy's own timeout stays; the others (of
// Sluice's format) take REDIS_TIMEOUT too.
func TestEnvTimeouts(t *testing.T) {
	e, err := ReadEnv(mapEnv(envWith("REDIS_TIMEOUT", "150ms", "REDIS_PERSECOND", "true", "REDIS_PERSECOND_SOCKET_TYPE", "tcp",
		"REDIS_PERSECOND_URL", "ps:1", "REDIS_PERSECOND_TIMEOUT", "70ms")))
	if err != nil {
		t.Fatal(err)
	}
	fw := func(w time.Duration) *config.Policy {
		return &config.Policy{Envoy: true, Algorithm: driver.AlgorithmFixedWindow, Params: driver.Params{Limit: 1, Window: w}}
	}
	own := fw(time.Minute)
	own.Timeout = time.Second
	native := &config.Policy{Algorithm: driver.AlgorithmFixedWindow, Params: driver.Params{Limit: 1, Window: time.Second}}
	c := &config.Config{Policies: []*config.Policy{fw(time.Second), fw(time.Minute), fw(5 * time.Second), own, native}}
	orig := c.Policies[0]
	e.Adjust(c)
	for i, want := range []time.Duration{70 * time.Millisecond, 150 * time.Millisecond, 150 * time.Millisecond, time.Second, 150 * time.Millisecond} {
		if got := c.Policies[i].Timeout; got != want {
			t.Errorf("policy %d: timeout %v, want %v", i, got, want)
		}
	}
	if orig.Timeout != 0 {
		t.Error("Adjust changed a policy it was given instead of a copy")
	}
	if !PerSecondPolicy(c.Policies[0]) || PerSecondPolicy(c.Policies[2]) || PerSecondPolicy(native) {
		t.Error("PerSecondPolicy: want the one-second envoy window only")
	}
}
