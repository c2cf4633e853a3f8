package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/valkeytest"
)

// sluiceEnv runs the sluice binary with env added to the environment.
func sluiceEnv(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil && cmd.ProcessState == nil {
		t.Fatalf("sluice %v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// TestE2EAuthFailuresNameTheSetting: against a real valkey-server with
// requirepass, every command that connects says that Valkey refused to
// authenticate, NOAUTH (no password sent) or WRONGPASS (a wrong one), and
// names the setting that fixes it; sluice serve reports it in its log and
// on /readyz instead of "not connected yet".
func TestE2EAuthFailuresNameTheSetting(t *testing.T) {
	srv := valkeytest.Start(t)
	srv.RequirePass(t, "right-pass-8c1f")
	dir := t.TempDir()
	policies := "policies:\n  - {name: api, algorithm: gcra, burst: 5, rate: 5/s}\n"
	noPass := filepath.Join(dir, "nopass.yaml")
	writeFile(t, noPass, "valkey:\n  addresses: ["+srv.Addr+"]\n"+policies)
	withPass := filepath.Join(dir, "pass.yaml")
	writeFile(t, withPass, "valkey:\n  addresses: ["+srv.Addr+"]\n  password_env: E2E_VALKEY_PW\n"+policies)
	wrong := []string{"E2E_VALKEY_PW=wrong-pass"}

	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want []string // in stderr
	}{
		{"verify NOAUTH", nil, []string{"verify", "--config", noPass}, []string{"NOAUTH", "valkey.password_env", "valkey.password_file"}},
		{"verify WRONGPASS", wrong, []string{"verify", "--config", withPass}, []string{"WRONGPASS", "E2E_VALKEY_PW", "valkey.password_env"}},
		{"doctor NOAUTH", nil, []string{"doctor", "--config", noPass}, []string{"NOAUTH", "valkey.password_env"}},
		{"doctor WRONGPASS", wrong, []string{"doctor", "--config", withPass}, []string{"WRONGPASS", "E2E_VALKEY_PW"}},
		{"inspect NOAUTH", nil, []string{"inspect", "--config", noPass, "api", "k"}, []string{"NOAUTH", "valkey.password_env"}},
		{"keys WRONGPASS", wrong, []string{"keys", "--config", withPass}, []string{"WRONGPASS", "E2E_VALKEY_PW"}},
		{"reset WRONGPASS", wrong, []string{"reset", "--config", withPass, "api", "k"}, []string{"WRONGPASS", "E2E_VALKEY_PW"}},
		{"bench NOAUTH", nil, []string{"bench", "--valkey", srv.Addr, "--duration", "1s"}, []string{"NOAUTH", "--password-env"}},
		{"bench WRONGPASS", wrong, []string{"bench", "--valkey", srv.Addr, "--duration", "1s", "--password-env", "E2E_VALKEY_PW"}, []string{"WRONGPASS", "$E2E_VALKEY_PW", "--password-env"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := sluiceEnv(t, tc.env, tc.args...)
			t.Logf("%s", stderr)
			if code == 0 {
				t.Fatalf("exit 0:\n%s\n%s", stdout, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}

	// The right password: bench runs (and so the flags work).
	if code, stdout, stderr := sluiceEnv(t, []string{"E2E_VALKEY_PW=right-pass-8c1f"}, "bench", "--valkey", srv.Addr, "--duration", "300ms",
		"--password-env", "E2E_VALKEY_PW", "--concurrency", "2", "--keys", "10"); code != 0 {
		t.Errorf("bench with the right password: exit %d\n%s\n%s", code, stdout, stderr)
	}

	// serve: the log and /readyz say why it is not connected.
	p := serve(t, wrong, "--config", withPass)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.Logs(), "WRONGPASS") {
		if time.Now().After(deadline) {
			t.Fatalf("serve did not log the refusal:\n%s", p.Logs())
		}
		time.Sleep(25 * time.Millisecond)
	}
	logs := p.Logs()
	if !strings.Contains(logs, "refused to authenticate") || !strings.Contains(logs, "E2E_VALKEY_PW") || !strings.Contains(logs, `"level":"ERROR"`) {
		t.Errorf("the log does not report the authentication failure with its fix:\n%s", logs)
	}
	code, m := request(t, "GET", p.HTTP+"/readyz", "", "")
	detail, _ := m["detail"].(string)
	if code != 503 || !strings.Contains(detail, "WRONGPASS") || !strings.Contains(detail, "E2E_VALKEY_PW") || strings.Contains(detail, "not connected yet") {
		t.Errorf("/readyz: %d %v", code, m)
	}
}
