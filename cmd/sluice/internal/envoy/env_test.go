package envoy

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
)

func mapEnv(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// TestEnvoyEnv: envoyproxy/ratelimit's variables map as docs/migrating-from-envoy-ratelimit.md's
// table says, and what sluice cannot honour is refused by name.
func TestEnvoyEnv(t *testing.T) {
	base := map[string]string{"RUNTIME_ROOT": "/rt", "RUNTIME_SUBDIRECTORY": "ratelimit", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	e, err := ReadEnv(mapEnv(with("REDIS_AUTH", "user:pw", "PORT", "9000", "GRPC_PORT", "9001", "HOST", "127.0.0.1",
		"SHADOW_MODE", "true", "NEAR_LIMIT_RATIO", "0.5", "MERGE_DOMAIN_CONFIG", "true", "REDIS_TLS", "true",
		"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true", "LOG_LEVEL", "DEBUG", "USE_STATSD", "false", "REDIS_POOL_SIZE", "9", "QUOTA_MODE", "true")))
	if err != nil {
		t.Fatal(err)
	}
	if e.Dir != "/rt/ratelimit/config" || !e.DirOptions.Merge || e.HTTPAddr != "127.0.0.1:9000" || e.GRPCAddr != "0.0.0.0:9001" ||
		!e.Options.ShadowMode || e.Options.NearLimitRatio != 0.5 || !e.Options.StopIncrementWhenOverLimit || e.LogLevel != "debug" || !e.Options.QuotaMode {
		t.Errorf("mapped: %+v", e)
	}
	if e.Valkey.Username != "user" || e.Valkey.TLS == nil || len(e.Valkey.Addresses) != 1 {
		t.Errorf("valkey: %+v", e.Valkey)
	}
	if pw, err := e.Valkey.Password(e.LookupEnv); err != nil || pw != "pw" {
		t.Errorf("password: %q %v", pw, err)
	}
	if len(e.Notes) == 0 || !strings.Contains(strings.Join(e.Notes, " "), "REDIS_POOL_SIZE") {
		t.Errorf("REDIS_POOL_SIZE not noted: %v", e.Notes)
	}
	for _, kv := range [][]string{
		{"USE_STATSD", "true"}, {"REDIS_TYPE", "sentinel"}, {"REDIS_TYPE", "proxy"}, {"REDIS_SOCKET_TYPE", "unix"}, {"BACKEND_TYPE", "memcache"},
		{"LIMIT_RESPONSE_HEADERS_ENABLED", "true"}, {"CONFIG_TYPE", "GRPC_XDS_DELTA"}, {"NEAR_LIMIT_RATIO", "2"}, {"SHADOW_MODE", "maybe"},
		{"REDIS_PERSECOND", "true"},
	} {
		if _, err := ReadEnv(mapEnv(with(kv...))); err == nil || !strings.Contains(err.Error(), kv[0]) {
			t.Errorf("%s=%s: %v", kv[0], kv[1], err)
		}
	}
	e, err = ReadEnv(mapEnv(with("REDIS_TYPE", "sentinel", "REDIS_URL", "mymaster,s1:26379,s2:26379", "REDIS_SENTINEL_AUTH", "spw")))
	if err != nil {
		t.Fatal(err)
	}
	if s := e.Valkey.Sentinel; s == nil || s.MasterSet != "mymaster" || len(s.Addresses) != 2 || s.PasswordEnv != "REDIS_SENTINEL_AUTH" || len(e.Valkey.Addresses) != 0 {
		t.Errorf("sentinel: %+v %+v", e.Valkey, e.Valkey.Sentinel)
	}
	if InEnv(mapEnv(map[string]string{"HOME": "/"})) {
		t.Error("envoy mode without its variables")
	}
}

// TestAdjustTimeout: REDIS_TIMEOUT is the decision timeout of the
// directory's limits (read without a valkey section of their own).
func TestAdjustTimeout(t *testing.T) {
	e, err := ReadEnv(mapEnv(map[string]string{"RUNTIME_ROOT": "/rt", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379", "REDIS_TIMEOUT": "2s"}))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("a.yaml", []byte("domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: minute, requests_per_unit: 5}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cp := *cfg
	e.Adjust(&cp)
	if len(cp.Policies) == 0 {
		t.Fatal("no policies")
	}
	for _, p := range cp.Policies {
		if p.Timeout != 2*time.Second {
			t.Errorf("policy %s: timeout %v, want REDIS_TIMEOUT's 2s", p.Name, p.Timeout)
		}
	}
	if cfg.Policies[0].Timeout != 0 {
		t.Errorf("the configuration read was changed: %v", cfg.Policies[0].Timeout)
	}
}
