package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/buildinfo"
)

// sluiceCmd runs the built binary with args (at most a minute) and returns
// its exit code and output.
func sluiceCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("sluice %v: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("sluice %v: still running after a minute\nstdout:\n%s\nstderr:\n%s", args, &out, &errb)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// TestE2EVersion: what sluice version prints is what the Go toolchain
// recorded in the binary (read independently with "go version -m"), and
// sluice serve exports the same values as sluice_build_info.
func TestE2EVersion(t *testing.T) {
	bin := binary(t)
	code, stdout, stderr := sluiceCmd(t, "version", "--json")
	if code != 0 || stderr != "" {
		t.Fatalf("version --json: exit %d, stderr %q", code, stderr)
	}
	var got buildinfo.Info
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("version --json: %v: %q", err, stdout)
	}
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	want := buildinfo.Info{Version: "(devel)"}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(strings.TrimSpace(line), "\t")
		switch {
		case strings.HasPrefix(line, bin+": "):
			want.GoVersion = strings.TrimPrefix(line, bin+": ")
		case len(f) >= 3 && f[0] == "mod":
			want.Path, want.Version = f[1], f[2]
		case len(f) == 2 && f[0] == "build":
			k, v, _ := strings.Cut(f[1], "=")
			switch k {
			case "vcs.revision":
				want.Revision = v
			case "vcs.time":
				want.Time = v
			case "vcs.modified":
				want.Modified = v == "true"
			}
		}
	}
	if got != want {
		t.Errorf("sluice version --json = %+v\ngo version -m says %+v", got, want)
	}
	if _, line, _ := sluiceCmd(t, "--version"); strings.TrimSpace(line) != got.String() {
		t.Errorf("sluice --version = %q, want %q", line, got.String())
	}

	p := serve(t, nil, "--grpc-listen", "off")
	resp, err := http.Get(p.HTTP + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	metrics, _ := io.ReadAll(resp.Body)
	wantLine := fmt.Sprintf(`sluice_build_info{goversion=%q,modified="%t",revision=%q,version=%q} 1`,
		got.GoVersion, got.Modified, got.Revision, got.Version)
	if !strings.Contains(string(metrics), wantLine+"\n") {
		t.Errorf("/metrics lacks %s:\n%s", wantLine, grepLines(metrics, "build_info"))
	}
}
