package httplimit_test

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeHTTPExample: every line of README.md's HTTP example (the first
// Go block of "## The HTTP edge") is a line of Example_apiKey's code, so
// the README shows code that compiles and limits requests without the key.
func TestReadmeHTTPExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_apikey_test.go")
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(string(src), "\n") {
		lines[strings.TrimSpace(l)] = true
	}
	_, sect, ok := strings.Cut(string(readme), "\n## The HTTP edge\n")
	if !ok {
		t.Fatal(`README.md has no "## The HTTP edge" section`)
	}
	_, block, ok := strings.Cut(sect, "```go\n")
	if !ok {
		t.Fatal("README.md's HTTP section has no Go block")
	}
	block, _, _ = strings.Cut(block, "```")
	if !strings.Contains(block, `httplimit.Header("X-API-Key")`) {
		t.Error("README.md's HTTP example has no per-API-key limit")
	}
	for _, l := range strings.Split(block, "\n") {
		if l = strings.TrimSpace(l); l != "" && !lines[l] {
			t.Errorf("README.md's HTTP example has %q, which Example_apiKey (httplimit/example_apikey_test.go) does not", l)
		}
	}
}
