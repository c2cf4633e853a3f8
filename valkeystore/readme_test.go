package valkeystore_test

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeLibraryExample: every line of README.md's library example (the
// first Go block of "## Quick start: the library") is a line of Example_connect, so the
// README shows code that compiles.
func TestReadmeLibraryExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(string(src), "\n") {
		lines[strings.TrimSpace(l)] = true
	}
	_, sect, ok := strings.Cut(string(readme), "\n## Quick start: the library\n")
	if !ok {
		t.Fatal(`README.md has no "## Quick start: the library" section`)
	}
	_, block, ok := strings.Cut(sect, "```go\n")
	if !ok {
		t.Fatal("README.md's library section has no Go block")
	}
	block, _, _ = strings.Cut(block, "```")
	if !strings.Contains(block, "valkeystore.Connect(") {
		t.Error("README.md's library example does not build its store with valkeystore.Connect")
	}
	for _, l := range strings.Split(block, "\n") {
		if l = strings.TrimSpace(l); l != "" && l != "..." && !lines[l] {
			t.Errorf("README.md's library example has %q, which Example_connect (valkeystore/example_test.go) does not", l)
		}
	}
}
