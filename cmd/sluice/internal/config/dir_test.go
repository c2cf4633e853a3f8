package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLoadDir: one domain per file; a domain in two files is refused
// without Merge (naming both files) and merged with it; dot-directories
// are skipped, other directories refused; dotfiles skipped on request;
// errors keep file:line:column.
func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"a.yaml": "domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 1, name: x}}\n",
		"b.yaml": "domain: d\ndescriptors:\n  - {key: b, rate_limit: {unit: second, requests_per_unit: 2, name: x}}\n",
		"c.yml":  "domain: e\ndescriptors:\n  - {key: c, rate_limit: {unit: second, requests_per_unit: 3}}\n",
	})
	os.Mkdir(filepath.Join(dir, "..data"), 0o755)
	_, _, err := LoadDir(dir, DirOptions{})
	if err == nil || !strings.Contains(err.Error(), "b.yaml:1:9: domain \"d\" is already defined at "+filepath.Join(dir, "a.yaml")) {
		t.Fatalf("without merge: %v", err)
	}
	c, sum, err := LoadDir(dir, DirOptions{Merge: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Domains) != 2 || len(c.Domain("d").Descriptors) != 2 {
		t.Fatalf("merged: %+v", c.Domains)
	}
	b, _ := c.Domain("d").Match([]Entry{{"b", "1"}})
	if p := c.Policy(b.Policy); p == nil || p.Limit != 2 || p.EnvoyLimit.Name != "x" {
		t.Fatalf("b: %+v", p)
	}
	if again, _ := DirFingerprint(dir, DirOptions{Merge: true}); string(again) != string(sum) {
		t.Error("fingerprint changed without a change")
	}
	writeFiles(t, dir, map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: minute, requests_per_unit: 1}}\n"})
	if again, _ := DirFingerprint(dir, DirOptions{Merge: true}); string(again) == string(sum) {
		t.Error("fingerprint unchanged after a change")
	}
	writeFiles(t, dir, map[string]string{".hidden": "not: yaml: at all: ["})
	if _, _, err := LoadDir(dir, DirOptions{Merge: true}); err == nil {
		t.Error("a bad dotfile was accepted without IgnoreDotfiles")
	}
	if _, _, err := LoadDir(dir, DirOptions{Merge: true, IgnoreDotfiles: true}); err != nil {
		t.Errorf("dotfile not ignored: %v", err)
	}
	writeFiles(t, dir, map[string]string{"z.yaml": "domain: z\ndescriptors:\n  - {key: a, rate_limit: {unit: fortnight, requests_per_unit: 1}}\n"})
	if _, _, err := LoadDir(dir, DirOptions{Merge: true, IgnoreDotfiles: true}); err == nil || !strings.Contains(err.Error(), "z.yaml:3:") {
		t.Errorf("bad file: %v", err)
	}
	os.Remove(filepath.Join(dir, "z.yaml"))
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	if _, _, err := LoadDir(dir, DirOptions{Merge: true, IgnoreDotfiles: true}); err == nil || !strings.Contains(err.Error(), "directory inside") {
		t.Errorf("subdirectory: %v", err)
	}
	os.Remove(filepath.Join(dir, "sub"))
	writeFiles(t, dir, map[string]string{"s.yaml": "policies: []\n"})
	if _, _, err := LoadDir(dir, DirOptions{Merge: true, IgnoreDotfiles: true}); err == nil || !strings.Contains(err.Error(), "not an envoyproxy/ratelimit configuration") {
		t.Errorf("sluice format in a directory: %v", err)
	}
}
