package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestServeDocFlags: the flags docs/serve.md's table lists, with their
// defaults, are those `sluice serve -h` prints, no more and no fewer.
func TestServeDocFlags(t *testing.T) {
	code, stdout, _ := runCmd("serve", "-h")
	if code != 0 {
		t.Fatalf("serve -h: exit %d", code)
	}
	var have []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(stdout, -1) {
		have = append(have, m[1])
	}
	doc, err := os.ReadFile("../../docs/serve.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "## Flags\n")
	if !ok {
		t.Fatal("docs/serve.md has no ## Flags")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	var listed []string
	for _, m := range regexp.MustCompile("(?m)^\\| `--([a-z-]+)[^`]*` \\| ([^|]+) \\|").FindAllStringSubmatch(table, -1) {
		listed = append(listed, m[1])
		def := strings.Trim(strings.TrimSpace(m[2]), "`")
		if d := regexp.MustCompile(`^[0-9a-z.:]+$`); d.MatchString(def) && !strings.Contains(stdout, `(default "`+def+`")`) && !strings.Contains(stdout, "(default "+def+")") {
			t.Errorf("docs/serve.md gives --%s the default %q; serve -h says otherwise:\n%s", m[1], def, stdout)
		}
	}
	slices.Sort(have)
	slices.Sort(listed)
	if !slices.Equal(have, listed) {
		t.Errorf("docs/serve.md lists the flags %q, serve -h %q", listed, have)
	}
}
