package config

import (
	"fmt"

	"github.com/sluicehq/sluice"
)

// NamedFile is one file of envoyproxy/ratelimit's format held in memory:
// its name, for error messages, and its contents.
type NamedFile struct {
	Path string
	Data []byte
}

// LoadFiles decodes files as LoadDir decodes the files of a directory (one
// domain each, in the order given, merging a domain defined by several
// only when merge is set), for a configuration read from elsewhere than a
// directory (xDS) and known as source.
func LoadFiles(source string, files []NamedFile, merge bool) (*Config, error) {
	df := make([]dirFile, len(files))
	for i, f := range files {
		df[i] = dirFile{path: f.Path, data: f.Data}
	}
	c := &Config{Source: source, Prefix: sluice.DefaultPrefix}
	if err := decodeDirFiles(c, df, merge); err != nil {
		return nil, err
	}
	if len(c.Domains) == 0 {
		return nil, fmt.Errorf("%s: no domains: nothing to limit", source)
	}
	return c, nil
}
