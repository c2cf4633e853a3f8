package deploytest

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// docFiles are the Markdown files a reader follows links through.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CHANGELOG.md", "benchmarks/README.md"}
	for _, g := range []string{"docs/*.md", "benchmarks/history/*.md"} {
		m, err := filepath.Glob(filepath.Join(repoRoot, g))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			rel, _ := filepath.Rel(repoRoot, f)
			files = append(files, rel)
		}
	}
	return files
}

// userDocs are the files for users: README.md and docs/ (measurement
// history lives under benchmarks/).
func userDocs(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, f := range docFiles(t) {
		if f == "README.md" || strings.HasPrefix(f, "docs"+string(filepath.Separator)) {
			out = append(out, f)
		}
	}
	return out
}

// headingSlugs returns the anchors GitHub gives the headings of a Markdown
// text: lower case, punctuation dropped, spaces as hyphens, a repeated
// heading numbered. Lines in code blocks are not headings.
func headingSlugs(text string) map[string]bool {
	slugs := map[string]bool{}
	seen := map[string]int{}
	fence := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
			continue
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimLeft(line, "#")
		if h == line || !strings.HasPrefix(h, " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(h)) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		s := b.String()
		if n := seen[s]; n > 0 {
			slugs[s+"-"+strconv.Itoa(n)] = true
		} else {
			slugs[s] = true
		}
		seen[s]++
	}
	return slugs
}

// pendingRefs are reference files README.md and docs/README.md already link
// to, written by the configuration and HTTP API reference work that has not
// landed yet. Once a file exists, this test fails until it is removed here.
var pendingRefs = map[string]bool{}

var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocLinks: every relative link of README.md, the changelog, docs/ and
// benchmarks/ names a file that exists, and every #anchor a heading of the
// file it points into, so each reference is one click away.
func TestDocLinks(t *testing.T) {
	for p := range pendingRefs {
		if _, err := os.Stat(filepath.Join(repoRoot, p)); err == nil {
			t.Errorf("%s exists now: remove it from pendingRefs", p)
		}
	}
	for _, f := range docFiles(t) {
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		fence := false
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "```") {
				fence = !fence
			}
			if fence {
				continue
			}
			for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				file := f
				if path != "" {
					file = filepath.Clean(filepath.Join(filepath.Dir(f), path))
				}
				if pendingRefs[filepath.ToSlash(file)] {
					continue
				}
				st, err := os.Stat(filepath.Join(repoRoot, file))
				if err != nil {
					t.Errorf("%s:%d: link %q: %v", f, i+1, target, err)
					continue
				}
				if anchor == "" {
					continue
				}
				if st.IsDir() || !strings.HasSuffix(file, ".md") {
					t.Errorf("%s:%d: link %q: an anchor into a file that is not Markdown", f, i+1, target)
					continue
				}
				tb, err := os.ReadFile(filepath.Join(repoRoot, file))
				if err != nil {
					t.Fatal(err)
				}
				if !headingSlugs(string(tb))[anchor] {
					t.Errorf("%s:%d: link %q: %s has no heading #%s", f, i+1, target, file, anchor)
				}
			}
		}
	}
}

// TestReadmeFrontDoor: README.md stays a front door: at most 400 lines, a
// table of contents linking every section, and a Performance section of at
// most 15 lines.
func TestReadmeFrontDoor(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if n := strings.Count(strings.TrimRight(text, "\n"), "\n") + 1; n > 400 {
		t.Errorf("README.md has %d lines, want at most 400 (details belong in docs/)", n)
	}
	_, contents, ok := strings.Cut(text, "\n## Contents\n")
	if !ok {
		t.Fatal("README.md has no ## Contents")
	}
	contents, _, _ = strings.Cut(contents, "\n## ")
	slugs := headingSlugs(text)
	linked := map[string]bool{}
	for _, m := range linkRE.FindAllStringSubmatch(contents, -1) {
		if a, ok := strings.CutPrefix(m[1], "#"); ok {
			linked[a] = true
		}
	}
	fence := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if fence || !strings.HasPrefix(line, "## ") || line == "## Contents" {
			continue
		}
		s := ""
		for a := range headingSlugs(line) {
			s = a
		}
		if !linked[s] || !slugs[s] {
			t.Errorf("README.md's contents do not link the section %q (#%s)", line, s)
		}
	}
	_, perf, ok := strings.Cut(text, "\n## Performance\n")
	if !ok {
		t.Fatal("README.md has no ## Performance")
	}
	perf, _, _ = strings.Cut(perf, "\n## ")
	if n := strings.Count(strings.Trim(perf, "\n"), "\n") + 1; n > 15 {
		t.Errorf("README.md's Performance section has %d lines, want at most 15 (the rest belongs in benchmarks/)", n)
	}
}

// TestUserDocsHoldNoMeasurementHistory: README.md and docs/ carry no commit
// ids, load averages, clock times of runs or the project's internal goals;
// those belong to benchmarks/history/.
func TestUserDocsHoldNoMeasurementHistory(t *testing.T) {
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`(?i)load average`),
		regexp.MustCompile("(?i)\\bcommits? `?[0-9a-f]{7,40}\\b"),
		regexp.MustCompile("`[0-9a-f]{7,12}`"),
		regexp.MustCompile(`\b[0-2]\d:[0-5]\d(:[0-5]\d)?(-[0-2]\d:[0-5]\d(:[0-5]\d)?)? UTC\b`),
		regexp.MustCompile(`(?i)\bgoals? (is|are|was|were) (not )?(met|reached)\b|\b(the|our) goal of\b|\bgoal: \d`),
	} {
		for _, f := range userDocs(t) {
			b, err := os.ReadFile(filepath.Join(repoRoot, f))
			if err != nil {
				t.Fatal(err)
			}
			for i, line := range strings.Split(string(b), "\n") {
				if m := re.FindString(line); m != "" {
					t.Errorf("%s:%d: %q is measurement history (move it to benchmarks/history/): %s", f, i+1, m, line)
				}
			}
		}
	}
}
