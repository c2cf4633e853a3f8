package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	e, err := readEnvoyEnv(mapEnv(with("REDIS_AUTH", "user:pw", "PORT", "9000", "GRPC_PORT", "9001", "HOST", "127.0.0.1",
		"SHADOW_MODE", "true", "NEAR_LIMIT_RATIO", "0.5", "MERGE_DOMAIN_CONFIG", "true", "REDIS_TLS", "true",
		"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true", "LOG_LEVEL", "DEBUG", "USE_STATSD", "false", "REDIS_POOL_SIZE", "9", "QUOTA_MODE", "true")))
	if err != nil {
		t.Fatal(err)
	}
	if e.dir != "/rt/ratelimit/config" || !e.dirOpts.Merge || e.httpAddr != "127.0.0.1:9000" || e.grpcAddr != "0.0.0.0:9001" ||
		!e.envoy.ShadowMode || e.envoy.NearLimitRatio != 0.5 || !e.envoy.StopIncrementWhenOverLimit || e.logLevel != "debug" || !e.envoy.QuotaMode {
		t.Errorf("mapped: %+v", e)
	}
	if e.valkey.Username != "user" || e.valkey.TLS == nil || len(e.valkey.Addresses) != 1 {
		t.Errorf("valkey: %+v", e.valkey)
	}
	if pw, err := e.valkey.Password(e.env); err != nil || pw != "pw" {
		t.Errorf("password: %q %v", pw, err)
	}
	if len(e.notes) == 0 || !strings.Contains(strings.Join(e.notes, " "), "REDIS_POOL_SIZE") {
		t.Errorf("REDIS_POOL_SIZE not noted: %v", e.notes)
	}
	for _, kv := range [][]string{
		{"USE_STATSD", "true"}, {"REDIS_TYPE", "sentinel"}, {"REDIS_TYPE", "proxy"}, {"REDIS_SOCKET_TYPE", "unix"}, {"BACKEND_TYPE", "memcache"},
		{"LIMIT_RESPONSE_HEADERS_ENABLED", "true"}, {"CONFIG_TYPE", "GRPC_XDS_SOTW"}, {"NEAR_LIMIT_RATIO", "2"}, {"SHADOW_MODE", "maybe"},
		{"REDIS_PERSECOND", "true"},
	} {
		if _, err := readEnvoyEnv(mapEnv(with(kv...))); err == nil || !strings.Contains(err.Error(), kv[0]) {
			t.Errorf("%s=%s: %v", kv[0], kv[1], err)
		}
	}
	e, err = readEnvoyEnv(mapEnv(with("REDIS_TYPE", "sentinel", "REDIS_URL", "mymaster,s1:26379,s2:26379", "REDIS_SENTINEL_AUTH", "spw")))
	if err != nil {
		t.Fatal(err)
	}
	if s := e.valkey.Sentinel; s == nil || s.MasterSet != "mymaster" || len(s.Addresses) != 2 || s.PasswordEnv != "REDIS_SENTINEL_AUTH" || len(e.valkey.Addresses) != 0 {
		t.Errorf("sentinel: %+v %+v", e.valkey, e.valkey.Sentinel)
	}
	if envoyMode(mapEnv(map[string]string{"HOME": "/"})) {
		t.Error("envoy mode without its variables")
	}
}

// TestValidateConfigDir: validate-config reads a configuration directory,
// merging domains only when asked.
func TestValidateConfigDir(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"a.yaml": "domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 1}}\n",
		"b.yaml": "domain: d\ndescriptors:\n  - {key: b, rate_limit: {unit: second, requests_per_unit: 1}}\n",
	} {
		os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644)
	}
	if code, _, stderr := runCmd("validate-config", dir); code != 1 || !strings.Contains(stderr, "MERGE_DOMAIN_CONFIG") {
		t.Errorf("without merging: %d %q", code, stderr)
	}
	if code, stdout, stderr := runCmd("validate-config", "--merge-domains", dir); code != 0 || !strings.Contains(stdout, "2 policies, 1 domains") {
		t.Errorf("merged: %d %q %q", code, stdout, stderr)
	}
}

// TestEnvoyEnvListens: the environment's addresses are the ones listened
// on (not sluice's defaults), and flags given explicitly win over them.
func TestEnvoyEnvListens(t *testing.T) {
	env := mapEnv(map[string]string{"RUNTIME_ROOT": t.TempDir(), "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:1", "PORT": "9100", "GRPC_PORT": "9101"})
	f := &serveFlags{set: map[string]bool{}, listen: defaultListen, grpcListen: defaultGRPCListen, logLevel: "info"}
	if code := f.readEnvironment(env, io.Discard); code != 0 {
		t.Fatal(code)
	}
	if got := pick(f.set["listen"], f.listen, "", defaultListen); got != "0.0.0.0:9100" {
		t.Errorf("HTTP on %s", got)
	}
	if got := pick(f.set["grpc-listen"], f.grpcListen, "", defaultGRPCListen); got != "0.0.0.0:9101" {
		t.Errorf("gRPC on %s", got)
	}
	f = &serveFlags{set: map[string]bool{"listen": true}, listen: "127.0.0.1:1", grpcListen: defaultGRPCListen, logLevel: "info"}
	f.readEnvironment(env, io.Discard)
	if f.listen != "127.0.0.1:1" {
		t.Errorf("the flag lost to the environment: %s", f.listen)
	}
}
