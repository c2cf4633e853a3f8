package envoy_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUpstreamFilesUnchanged: the files of testdata/upstream that are
// upstream's are as upstream has them at the pinned commit
// (testdata/upstream/UPSTREAM lists their SHA-256s), and nothing else in
// it but the stand-ins that file names.
func TestUpstreamFilesUnchanged(t *testing.T) {
	root := filepath.Join("testdata", "upstream")
	f, err := os.Open(filepath.Join(root, "UPSTREAM"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	listed := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		sum, path, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("UPSTREAM: %q", line)
		}
		listed[path] = true
		data, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != sum {
			t.Errorf("%s differs from upstream's", path)
		}
	}
	filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		ours := rel == "UPSTREAM" || rel == "go.mod" || rel == "go.sum" ||
			strings.HasPrefix(rel, filepath.Join("src", "service_cmd")) || strings.HasPrefix(rel, filepath.Join("src", "memcached"))
		if !listed[rel] && !ours {
			t.Errorf("%s is neither upstream's (listed in UPSTREAM) nor a stand-in", rel)
		}
		return nil
	})
	if len(listed) < 20 {
		t.Errorf("UPSTREAM lists %d files", len(listed))
	}
}
