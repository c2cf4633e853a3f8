package deploytest

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/valkeytest"
	"go.yaml.in/yaml/v3"
)

type composeFile struct {
	Services map[string]struct {
		Image   string   `yaml:"image"`
		Command []string `yaml:"command"`
		Build   *struct {
			Context    string `yaml:"context"`
			Dockerfile string `yaml:"dockerfile"`
		} `yaml:"build"`
		Ports     []string       `yaml:"ports"`
		Volumes   []string       `yaml:"volumes"`
		DependsOn map[string]any `yaml:"depends_on"`
		ReadOnly  bool           `yaml:"read_only"`
	} `yaml:"services"`
}

// TestCompose checks compose.yaml against the repository and the binary:
// it builds deploy/Containerfile from the repository root, its command is
// real flags whose ports it publishes, the mounted config validates and
// names the compose Valkey service, and the binary serves with that command
// line (on free ports) and config.
func TestCompose(t *testing.T) {
	b, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(false)
	if err := dec.Decode(&cf); err != nil {
		t.Fatal(err)
	}
	s, ok := cf.Services["sluice"]
	if !ok {
		t.Fatalf("no sluice service (have %v)", cf.Services)
	}
	if s.Build == nil {
		t.Fatal("the sluice service has no build")
	}
	ctx := filepath.Clean(s.Build.Context)
	if abs, _ := filepath.Abs(ctx); abs != mustAbs(t, repoRoot) {
		t.Errorf("build context %s is not the repository root", s.Build.Context)
	}
	if _, err := os.Stat(filepath.Join(ctx, s.Build.Dockerfile)); err != nil || filepath.Base(s.Build.Dockerfile) != "Containerfile" {
		t.Errorf("build dockerfile %s: %v", s.Build.Dockerfile, err)
	}
	if !s.ReadOnly {
		t.Error("the sluice service's root file system is writable")
	}
	vals := serveArgs(t, "compose command", s.Command)
	published := map[string]bool{}
	for _, p := range s.Ports {
		f := strings.Split(p, ":")
		published[f[len(f)-1]] = true
	}
	for _, name := range []string{"listen", "grpc-listen"} {
		_, port, err := net.SplitHostPort(vals[name])
		if err != nil || !published[port] {
			t.Errorf("--%s %s is not published (ports %v)", name, vals[name], s.Ports)
		}
	}
	var cfgSrc string
	for _, v := range s.Volumes {
		f := strings.Split(v, ":")
		if len(f) >= 2 && f[1] == vals["config"] {
			cfgSrc = f[0]
		}
	}
	if cfgSrc == "" {
		t.Fatalf("--config %s is not mounted (volumes %v)", vals["config"], s.Volumes)
	}
	cfg, err := config.Load(cfgSrc)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Valkey == nil || len(cfg.Valkey.Addresses) == 0 {
		t.Fatal("the mounted config names no Valkey")
	}
	host, _, _ := net.SplitHostPort(cfg.Valkey.Addresses[0])
	if _, ok := cf.Services[host]; !ok {
		t.Errorf("the config's Valkey host %s is not a compose service", host)
	}
	if _, ok := s.DependsOn[host]; !ok {
		t.Errorf("the sluice service does not depend on %s", host)
	}

	v := valkeytest.Start(t)
	p := start(t, binary(t), nil, nil, runnable(t, "compose command", s.Command, cfgSrc, v.Addr)...)
	waitReady(t, p)
	if code, body := post(t, p.HTTP+"/v1/check", `{"policy":"api","key":"compose"}`); code != 200 || !strings.Contains(body, `"allowed":true`) {
		t.Errorf("/v1/check: %d %s", code, body)
	}
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
