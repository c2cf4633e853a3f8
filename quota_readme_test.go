package sluice_test

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeQuotas: the Go lines and outputs README.md's "Quotas" section
// and docs/quotas.md show are those of quota_example_test.go, whose
// Examples check them.
func TestReadmeQuotas(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## Quotas: calendar periods, plans and key overrides")
	if !ok {
		t.Fatal("README.md has no Quotas section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	checkQuotaDoc(t, "README.md", section)
	doc, err := os.ReadFile("docs/quotas.md")
	if err != nil {
		t.Fatal(err)
	}
	checkQuotaDoc(t, "docs/quotas.md", string(doc))
}

func checkQuotaDoc(t *testing.T, name, section string) {
	t.Helper()
	examples, err := os.ReadFile("quota_example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(section, "```go\n")[1:]
	if len(blocks) != 2 {
		t.Fatalf("%s: %d Go blocks, want 2", name, len(blocks))
	}
	for _, b := range blocks {
		b, _, _ = strings.Cut(b, "```")
		for _, line := range strings.Split(b, "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "// ...") {
				continue
			}
			if out, ok := strings.CutPrefix(line, "// "); ok {
				// An output line, maybe followed by a comment of its own.
				if i := strings.Index(out, "     "); i > 0 {
					out = out[:i]
				}
				line = "// " + out
			}
			if !strings.Contains(string(examples), line) {
				t.Errorf("%s shows %q, which quota_example_test.go does not hold", name, line)
			}
		}
	}
	flat := strings.Join(strings.Fields(section), " ")
	for _, fact := range []string{"1,000 taken on the free plan's 1,000 an hour, then 48,999 left on pro's 50,000"} {
		if !strings.Contains(flat, fact) {
			t.Errorf("%s no longer says %q (Example_planChange)", name, fact)
		}
	}
}
