package deploytest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/valkeytest"
)

const unitFile = "systemd/sluice.service"

// unitDirectives returns the unit's directives by section ("Service.ExecStart"),
// each with every value it is given.
func unitDirectives(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	section := ""
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, _ := strings.Cut(line, "=")
			out[section+"."+k] = append(out[section+"."+k], v)
		}
	}
	return out
}

func requireSystemdAnalyze(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("systemd-analyze is missing: run scripts/install-systemd-analyze.sh (apt-get install systemd) (%v)", err)
	}
	return path
}

// TestSystemdUnit checks the unit with systemd-analyze verify (no warning
// at all) and systemd-analyze security (exposure at most 2.0 of 10), keeps
// the hardening the docs promise, and runs its ExecStart (flags of the real
// binary) with listen addresses moved to free ports.
func TestSystemdUnit(t *testing.T) {
	sa := requireSystemdAnalyze(t)
	d := unitDirectives(t)
	exec0 := d["Service.ExecStart"]
	if len(exec0) != 1 {
		t.Fatalf("ExecStart %q: want one", exec0)
	}
	argv := strings.Fields(exec0[0])

	// systemd-analyze verify wants the ExecStart binary to exist: the unit
	// is checked as is, with only the binary's path pointed at the build.
	dir := t.TempDir()
	unit, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	checked := filepath.Join(dir, "sluice.service")
	if err := os.WriteFile(checked, []byte(strings.Replace(string(unit), argv[0]+" ", binary(t)+" ", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", "--man=no", checked).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err = exec.Command(sa, "security", "--offline=yes", "--threshold=20", "--no-pager", checked).CombinedOutput()
	if err != nil {
		t.Errorf("systemd-analyze security: exposure above 2.0 (%v)\n%s", err, out)
	}

	for k, want := range map[string]string{
		"Service.DynamicUser":     "yes",
		"Service.NoNewPrivileges": "yes",
		"Service.ProtectSystem":   "strict",
		"Service.ReadOnlyPaths":   "/etc/sluice",
		"Service.ExecReload":      "/bin/kill -HUP $MAINPID",
	} {
		if got := d[k]; len(got) != 1 || got[0] != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}

	vals := serveArgs(t, "ExecStart", argv[1:])
	if !strings.HasPrefix(vals["config"], "/etc/sluice/") {
		t.Errorf("--config %s is outside ReadOnlyPaths /etc/sluice", vals["config"])
	}
	for name, port := range map[string]int{"listen": 8080, "grpc-listen": 8081} {
		if got := portOf(t, "ExecStart --"+name, vals[name]); got != port {
			t.Errorf("ExecStart --%s port %d, want %d like the other deployments", name, got, port)
		}
	}
	cfg := filepath.Join(repoRoot, "deploy", filepath.Base(vals["config"]))
	if _, err := config.Load(cfg); err != nil {
		t.Fatalf("the config the unit's docs install (%s): %v", cfg, err)
	}
	v := valkeytest.Start(t)
	p := start(t, binary(t), nil, nil, append(runnable(t, "ExecStart", argv[1:], cfg, v.Addr), "--log-level", "debug")...)
	waitReady(t, p)
	// ExecReload: SIGHUP reloads and the service keeps serving.
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a reload after SIGHUP", func() bool { return strings.Contains(p.Logs(), `"reason":"SIGHUP"`) })
	if code, body := get(t, p.HTTP+"/healthz"); code != 200 {
		t.Errorf("/healthz after SIGHUP: %d %s", code, body)
	}
}
