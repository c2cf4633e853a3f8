package sluice_test

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeInFlight: every line of README.md's in-flight example (the Go
// block of "## In-flight limits") is a line of Example_inFlight, whose
// Output checks what it does.
func TestReadmeInFlight(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("inflight_example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(string(src), "\n") {
		lines[strings.TrimSpace(l)] = true
	}
	_, sect, ok := strings.Cut(string(readme), "\n## In-flight limits\n")
	if !ok {
		t.Fatal(`README.md has no "## In-flight limits" section`)
	}
	sect, _, _ = strings.Cut(sect, "\n## ")
	_, block, ok := strings.Cut(sect, "```go\n")
	if !ok {
		t.Fatal("README.md's in-flight section has no Go block")
	}
	block, _, _ = strings.Cut(block, "```")
	for _, want := range []string{"sluice.InFlight{", ".Acquire(", ".Release(", ".Renew("} {
		if !strings.Contains(block, want) {
			t.Errorf("README.md's in-flight example has no %s", want)
		}
	}
	for _, l := range strings.Split(block, "\n") {
		if l = strings.TrimSpace(l); l != "" && !lines[l] {
			t.Errorf("README.md's in-flight example has %q, which Example_inFlight (inflight_example_test.go) does not", l)
		}
	}
}
