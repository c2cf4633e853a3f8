package deploytest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// modulePath is read from go.mod.
func modulePath(t *testing.T) string {
	b, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^module (\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("go.mod has no module line")
	}
	return string(m[1])
}

// shellLines returns the lines of the ```sh blocks of a Markdown file, with
// comments cut off.
func shellLines(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "```sh"):
			in = true
		case strings.HasPrefix(line, "```"):
			in = false
		case in:
			if i := strings.Index(line, " #"); i >= 0 {
				line = line[:i]
			}
			if line = strings.TrimSpace(line); line != "" {
				out = append(out, line)
			}
		}
	}
	return out
}

// TestInstallAndDeployCommands checks the commands README.md,
// docs/deploy.md and docs/proxies.md give: go get and go install name this module and its
// binary, every `sluice serve` uses the binary's real flags, and the files
// they name exist.
func TestInstallAndDeployCommands(t *testing.T) {
	mod := modulePath(t)
	seen := map[string]bool{}
	for _, doc := range []string{filepath.Join(repoRoot, "README.md"), filepath.Join(repoRoot, "docs", "deploy.md"), filepath.Join(repoRoot, "docs", "proxies.md")} {
		for _, line := range shellLines(t, doc) {
			f := strings.Fields(line)
			for i := 0; i+1 < len(f); i++ {
				switch {
				case f[i] == "go" && (f[i+1] == "get" || f[i+1] == "install") && i+2 < len(f):
					pkg, ver, _ := strings.Cut(f[i+2], "@")
					if ver != "latest" {
						t.Errorf("%s: %q: want @latest", doc, line)
					}
					if !strings.HasPrefix(pkg+"/", mod+"/") {
						t.Errorf("%s: %q is not in module %s", doc, line, mod)
					}
					if st, err := os.Stat(filepath.Join(repoRoot, strings.TrimPrefix(pkg, mod))); err != nil || !st.IsDir() {
						t.Errorf("%s: %q: no such package", doc, line)
					}
					seen["go "+f[i+1]] = true
				case f[i] == "sluice" && f[i+1] == "serve":
					serveArgs(t, doc+": "+line, f[i+1:])
					seen["serve"] = true
				}
			}
			for _, a := range f {
				if strings.HasPrefix(a, "deploy/") {
					if _, err := os.Stat(filepath.Join(repoRoot, a)); err != nil {
						t.Errorf("%s: %q: %v", doc, line, err)
					}
					seen["files"] = true
				}
			}
		}
	}
	for _, want := range []string{"go get", "go install", "serve", "files"} {
		if !seen[want] {
			t.Errorf("no %s command found in README.md and docs/deploy.md", want)
		}
	}
}

// TestReleaseFiles: the licence is Apache-2.0's text, NOTICE names it, the
// changelog exists, and no module's go directive asks for a patch release
// (go 1.N.0: users of the library are not forced onto a newer Go patch).
func TestReleaseFiles(t *testing.T) {
	lic, err := os.ReadFile(filepath.Join(repoRoot, "LICENSE"))
	if err != nil || !strings.Contains(string(lic), "Apache License") || !strings.Contains(string(lic), "Version 2.0, January 2004") ||
		!strings.Contains(string(lic), "END OF TERMS AND CONDITIONS") {
		t.Errorf("LICENSE is not the Apache License 2.0 text (%v)", err)
	}
	if b, err := os.ReadFile(filepath.Join(repoRoot, "NOTICE")); err != nil || !strings.Contains(string(b), "Apache License, Version 2.0") {
		t.Errorf("NOTICE does not name the licence (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(repoRoot, "CHANGELOG.md")); err != nil {
		t.Error(err)
	}
	mods, _ := filepath.Glob(filepath.Join(repoRoot, "*", "go.mod"))
	mods = append(mods, filepath.Join(repoRoot, "go.mod"), filepath.Join(repoRoot, "cmd", "sluice", "go.mod"))
	for _, m := range mods {
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		d := regexp.MustCompile(`(?m)^go (\S+)`).FindSubmatch(b)
		if d == nil || !regexp.MustCompile(`^1\.\d+\.0$`).Match(d[1]) {
			t.Errorf("%s: go directive %q, want 1.N.0", m, d)
		}
	}
}
