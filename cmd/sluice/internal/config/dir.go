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
	var errs []string
	for _, f := range files {
		d := &decoder{file: f.path}
		d.domainFile(c, f.data, o.Merge)
		if err := d.err(); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return nil, sum, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	if len(c.Domains) == 0 {
		return nil, sum, fmt.Errorf("%s: no configuration files: nothing to limit", dir)
	}
	return c, sum, nil
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
		st, err := os.Stat(path) // follows links
		if err != nil {
			return nil, nil, err
		}
		if st.IsDir() {
			if strings.HasPrefix(name, ".") {
				continue
			}
			return nil, nil, fmt.Errorf("%s: a directory inside the configuration directory is not read; move its files up", path)
		}
		if o.IgnoreDotfiles && strings.HasPrefix(name, ".") {
			continue
		}
		if len(files) == MaxDirFiles {
			return nil, nil, fmt.Errorf("%s: more than %d files", dir, MaxDirFiles)
		}
		data, err := readLimited(path)
		if err != nil {
			return nil, nil, err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(data))
		h.Write(data)
		files = append(files, dirFile{path: path, data: data})
	}
	return files, h.Sum(nil), nil
}

func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, MaxFileSize)
	}
	return data, nil
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
	root := d.parseDocument(data)
	if root == nil {
		return nil
	}
	if root = d.resolve(root); root == nil {
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
