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
