package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestE2EValidateSecrets: validate-config --secrets reports, through the
// binary and with the environment it is given, what sluice serve would
// refuse when it starts; without --secrets the environment is not read.
func TestE2EValidateSecrets(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		writeFile(t, p, data)
		return p
	}
	tokenFile := write("token", "a-long-enough-admin-token\n")
	const pol = "policies:\n  - {name: api, algorithm: gcra, burst: 20, rate: 5/s}\n"
	envCfg := write("env.yaml", "admin: {token_env: SLUICE_TEST_ADMIN_TOKEN}\n"+pol)
	fileCfg := write("file.yaml", "admin: {token_file: "+tokenFile+"}\n"+pol)
	missingFile := write("missing.yaml", "admin: {token_file: "+filepath.Join(dir, "nope")+"}\n"+pol)
	password := write("password.yaml", "valkey:\n  addresses: [127.0.0.1:1]\n  password_file: "+filepath.Join(dir, "nope")+"\n"+pol)
	ca := write("ca.yaml", "valkey:\n  addresses: [127.0.0.1:1]\n  tls: {ca_file: "+filepath.Join(dir, "nope.pem")+"}\n"+pol)
	run := func(env []string, args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(binary(t), append([]string{"validate-config"}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		cmd.Run()
		noStackTrace(t, strings.Join(args, " "), errb.String())
		return cmd.ProcessState.ExitCode(), out.String(), errb.String()
	}
	for _, tc := range []struct {
		env  []string
		args []string
		code int
		want string
	}{
		{nil, []string{envCfg}, 0, "env.yaml: ok: 1 policies"},
		{nil, []string{"--secrets", envCfg}, 1, "env.yaml: admin.token_env: environment variable SLUICE_TEST_ADMIN_TOKEN is not set"},
		{[]string{"SLUICE_TEST_ADMIN_TOKEN=short"}, []string{"--secrets", envCfg}, 1, "admin token must be at least 16 characters, got 5"},
		{[]string{"SLUICE_TEST_ADMIN_TOKEN=0123456789abcdef"}, []string{"--secrets", envCfg}, 0, "env.yaml: ok: 1 policies, 0 domains, in-process store (limits per process), secrets readable"},
		{nil, []string{"--secrets", fileCfg}, 0, "secrets readable"},
		{nil, []string{"--secrets", missingFile}, 1, "admin.token_file: open " + filepath.Join(dir, "nope") + ": no such file or directory"},
		{nil, []string{"--secrets", password}, 1, "valkey.password_file: open"},
		{nil, []string{"--secrets", ca}, 1, "valkey.tls.ca_file: open"},
	} {
		code, stdout, stderr := run(tc.env, tc.args...)
		if code != tc.code || !strings.Contains(stdout+stderr, tc.want) || code == 1 && !strings.Contains(stderr, "sluice serve would refuse to start: "+dir) {
			t.Errorf("%v %v: exit %d, want %d and %q\nstdout: %s\nstderr: %s", tc.env, tc.args, code, tc.code, tc.want, stdout, stderr)
		}
	}
}
