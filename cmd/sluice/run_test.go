package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func runCmd(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(context.Background(), args, func(string) (string, bool) { return "", false }, &out, &errb)
	return code, out.String(), errb.String()
}

func TestUsage(t *testing.T) {
	if code, _, stderr := runCmd(); code != 2 || !strings.Contains(stderr, "usage: sluice") {
		t.Errorf("no args: %d %q", code, stderr)
	}
	if code, _, stderr := runCmd("frobnicate"); code != 2 || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Errorf("unknown: %d %q", code, stderr)
	}
	if code, stdout, _ := runCmd("help"); code != 0 || !strings.Contains(stdout, "serve") {
		t.Errorf("help: %d %q", code, stdout)
	}
	if code, _, stderr := runCmd("serve", "--bogus"); code != 2 || !strings.Contains(stderr, "bogus") {
		t.Errorf("serve --bogus: %d %q", code, stderr)
	}
}

// TestHelp: every command answers -h, -help and --help with its usage on
// stdout and exit code 0, and a bad flag with a message on stderr and exit
// code 2.
func TestHelp(t *testing.T) {
	for _, c := range commands() {
		for _, h := range []string{"-h", "-help", "--help"} {
			code, stdout, stderr := runCmd(c.name, h)
			if code != 0 || !strings.HasPrefix(stdout, "usage: sluice "+c.name) || stderr != "" {
				t.Errorf("sluice %s %s: exit %d, stdout %q, stderr %q", c.name, h, code, stdout, stderr)
			}
		}
		code, stdout, stderr := runCmd(c.name, "--no-such-flag")
		if code != 2 || stdout != "" || !strings.Contains(stderr, "no-such-flag") || !strings.Contains(stderr, "sluice "+c.name+" -h") {
			t.Errorf("sluice %s --no-such-flag: exit %d, stdout %q, stderr %q", c.name, code, stdout, stderr)
		}
		if !strings.Contains(usage(), "  "+c.name+" ") {
			t.Errorf("usage does not list %s:\n%s", c.name, usage())
		}
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		code, stdout, stderr := runCmd(args...)
		if code != 0 || !strings.HasPrefix(stdout, "sluice ") || !strings.Contains(stdout, runtime.Version()) || stderr != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	code, stdout, _ := runCmd("version", "--json")
	var v map[string]any
	if code != 0 || json.Unmarshal([]byte(stdout), &v) != nil || v["go"] != runtime.Version() || v["version"] == "" {
		t.Errorf("version --json: exit %d, %q", code, stdout)
	}
	if code, _, stderr := runCmd("version", "extra"); code != 2 || !strings.Contains(stderr, `unexpected argument "extra"`) {
		t.Errorf("version extra: exit %d, stderr %q", code, stderr)
	}
}

func TestValidateConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte("policies:\n  - {name: api, algorithm: token_bucket, burst: 20, rate: 5/s}\n"), 0o644)
	os.WriteFile(bad, []byte("policies:\n  - name: api\n    algorithm: token_bucket\n    burst: 20\n    rate: 5/fortnight\n"), 0o644)

	code, stdout, stderr := runCmd("validate-config", good, "../../examples/sluice.yaml")
	if code != 0 || !strings.Contains(stdout, "good.yaml: ok: 1 policies") || stderr != "" {
		t.Errorf("good: %d %q %q", code, stdout, stderr)
	}
	code, _, stderr = runCmd("validate-config", bad)
	if code != 1 || !strings.Contains(stderr, "bad.yaml:5:11: rate") || !strings.Contains(stderr, `unknown unit "fortnight"`) {
		t.Errorf("bad: %d %q", code, stderr)
	}
	// Policies that would harm Valkey are refused, naming the bound.
	bounds := filepath.Join(dir, "bounds.yaml")
	os.WriteFile(bounds, []byte("policies:\n  - {name: log, algorithm: sliding_log, limit: 100000, window: 1m}\n  - {name: slow, algorithm: gcra, burst: 100000, rate: 1/h}\n"), 0o644)
	code, _, stderr = runCmd("validate-config", bounds)
	if code != 1 || !strings.Contains(stderr, "MaxSlidingLogLimit") || !strings.Contains(stderr, "MaxWindow") {
		t.Errorf("bounds: %d %q", code, stderr)
	}
	if code, _, _ := runCmd("validate-config", filepath.Join(dir, "missing.yaml")); code != 1 {
		t.Errorf("missing file: %d", code)
	}
	if code, _, _ := runCmd("validate-config"); code != 2 {
		t.Errorf("no file: %d", code)
	}
}

// TestServeBadConfig: serve refuses to start on a bad file, with file:line.
func TestServeBadConfig(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("policies:\n  - {name: a, algorithm: gcra, burst: 1, rate: 1/s, colour: red}\n"), 0o644)
	code, _, stderr := runCmd("serve", "--config", bad, "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0")
	if code != 1 || !strings.Contains(stderr, "bad.yaml:2:") || !strings.Contains(stderr, `unknown field "colour"`) {
		t.Errorf("%d %q", code, stderr)
	}
}

// TestValidateConfigWarnsChosenKey: a forward_auth route every limit of
// which a client escapes with a new header value is valid (exit 0) but
// warned about, naming file, line and route; the shipped
// deploy/forward-auth.yaml is not.
func TestValidateConfigWarnsChosenKey(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "fa.yaml")
	os.WriteFile(file, []byte("policies:\n  - {name: api, algorithm: token_bucket, burst: 20, rate: 5/s}\nforward_auth:\n  trusted_proxies: [127.0.0.1]\n  routes:\n    - name: everything\n      limits: [{policy: api, key: [header:X-API-Key, client_ip]}]\n"), 0o644)
	code, stdout, stderr := runCmd("validate-config", file)
	if code != 0 || !strings.Contains(stdout, "fa.yaml: ok") || !strings.Contains(stderr, "warning: "+file+":6: forward_auth route everything:") || !strings.Contains(stderr, "never limited") {
		t.Errorf("header-keyed route: %d %q %q, want ok with a warning", code, stdout, stderr)
	}
	code, stdout, stderr = runCmd("validate-config", "../../deploy/forward-auth.yaml")
	if code != 0 || stderr != "" || !strings.Contains(stdout, "ok") {
		t.Errorf("deploy/forward-auth.yaml: %d %q %q, want ok without warnings", code, stdout, stderr)
	}
}
