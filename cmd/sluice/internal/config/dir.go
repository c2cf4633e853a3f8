package config

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sluicehq/sluice"
	"go.yaml.in/yaml/v3"
)

// A configuration directory, as envoyproxy/ratelimit lays it out: every
// file of one directory is one domain in its format.

// DirOptions say how to read a configuration directory.
type DirOptions struct {
	// Merge lets several files define one domain, their descriptors side
	// by side (MERGE_DOMAIN_CONFIG); without it a second definition of a
	// domain is an error.
	Merge bool
	// IgnoreDotfiles skips files whose name starts with '.'
	// (RUNTIME_IGNOREDOTFILES). Directories starting with '.' (such as a
	// Kubernetes ConfigMap's "..data") are always skipped.
	IgnoreDotfiles bool
}

// MaxDirFiles bounds the files read from a configuration directory.
const MaxDirFiles = 1000

// LoadDir reads every file of dir (symbolic links followed), in name
// order, each an envoyproxy/ratelimit configuration of one domain. It
// returns the configuration and a fingerprint of what it read (names and
// contents), to tell whether a later read differs. Errors name
// file:line:column as Parse's do.
func LoadDir(dir string, o DirOptions) (*Config, []byte, error) {
	files, sum, err := readDir(dir, o)
	if err != nil {
		return nil, sum, err
	}
	c := &Config{Source: dir, Prefix: sluice.DefaultPrefix}
	if err := decodeDirFiles(c, files, o.Merge); err != nil {
		return nil, sum, err
	}
	if len(c.Domains) == 0 {
		return nil, sum, fmt.Errorf("%s: no configuration files: nothing to limit", dir)
	}
	return c, sum, nil
}

// decodeDirFiles decodes each file of a directory into c; the error
// lists every file's problems.
func decodeDirFiles(c *Config, files []dirFile, merge bool) error {
	var errs []string
	for _, f := range files {
		d := &decoder{file: f.path}
		d.domainFile(c, f.data, merge)
		if err := d.err(); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}

// DirFingerprint returns what LoadDir would return as its fingerprint,
// without decoding anything.
func DirFingerprint(dir string, o DirOptions) ([]byte, error) {
	_, sum, err := readDir(dir, o)
	return sum, err
}

type dirFile struct {
	path string
	data []byte
}

func readDir(dir string, o DirOptions) ([]dirFile, []byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	h := sha256.New()
	var files []dirFile
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(dir, name)
		read, err := dirEntryRead(path, name, o)
		if err != nil {
			return nil, nil, err
		}
		if !read {
			continue
		}
		if len(files) == MaxDirFiles {
			return nil, nil, fmt.Errorf("%s: more than %d files", dir, MaxDirFiles)
		}
		data, err := readHashed(h, path, name)
		if err != nil {
			return nil, nil, err
		}
		files = append(files, dirFile{path: path, data: data})
	}
	return files, h.Sum(nil), nil
}

// dirEntryRead reports whether the entry name (at path, links followed)
// of a configuration directory is read: a dot directory, and a dotfile
// with IgnoreDotfiles, are not; another directory is an error.
func dirEntryRead(path, name string, o DirOptions) (bool, error) {
	st, err := os.Stat(path) // follows links
	if err != nil {
		return false, err
	}
	dot := strings.HasPrefix(name, ".")
	switch {
	case st.IsDir() && dot:
		return false, nil
	case st.IsDir():
		return false, fmt.Errorf("%s: a directory inside the configuration directory is not read; move its files up", path)
	}
	return !(o.IgnoreDotfiles && dot), nil
}

// readHashed reads the file at path and adds its name, length and
// contents to the fingerprint h.
func readHashed(h io.Writer, path, name string) ([]byte, error) {
	data, err := readLimited(path)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(h, "%s\x00%d\x00", name, len(data))
	h.Write(data)
	return data, nil
}

// readLimited reads the file at path, refusing more than MaxFileSize
// bytes.
func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAtMost(f, path)
}

// domainFile decodes one file of a configuration directory into c: a new
// domain, or with merge, more descriptors of one already read.
func (d *decoder) domainFile(c *Config, data []byte, merge bool) {
	root := d.domainRoot(data)
	if root == nil {
		return
	}
	f := d.fields(root, "envoyproxy/ratelimit config", domainSection)
	if f == nil {
		return
	}
	name := d.optString(f, "domain", "domain")
	prev := c.Domain(name)
	if prev == nil || name == "" {
		if dom := d.domain(c, root, f, true); dom != nil {
			c.Domains = append(c.Domains, dom)
		}
		return
	}
	if !merge {
		d.errorf(f["domain"].val, "domain %q is already defined at %s:%d (MERGE_DOMAIN_CONFIG=true merges them)", name, prev.File, prev.Line)
		return
	}
	d.mergeDomain(c, prev, f)
}

// domainRoot parses a file of a configuration directory: the mapping of its
// domain, or nil (reported) when it holds none.
func (d *decoder) domainRoot(data []byte) *yaml.Node {
	root := d.root(data)
	if root == nil {
		return nil
	}
	if root.Kind != yaml.MappingNode || !hasKey(root, "domain") {
		d.errorf(root, "not an envoyproxy/ratelimit configuration (a domain and its descriptors): every file of a configuration directory is one")
		return nil
	}
	return root
}

// mergeDomain adds the descriptors of a file's fields f to the domain prev
// of the same name, read before; its counting must be prev's.
func (d *decoder) mergeDomain(c *Config, prev *Domain, f map[string]field) {
	if x, ok := f["counting"]; ok {
		if s := d.str(x.val, "counting"); s != prev.Counting.String() {
			d.errorf(x.val, "counting %q differs from %q where domain %q is first defined (%s)", s, prev.Counting, prev.Name, prev.File)
		}
	}
	if x, ok := f["descriptors"]; ok {
		prev.Descriptors = d.moreDescriptors(c, prev, x.val, nil, prev.Descriptors)
	}
}
