package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/sluicehq/sluice/internal/config"
)

const validateUsage = `usage: sluice validate-config [--merge-domains] FILE|DIR [FILE|DIR...]

Checks each configuration file as sluice serve would load it and reports
every problem with file:line:column. A directory is read as
envoyproxy/ratelimit's configuration directory (every file one domain).
Exit code 0 when all are valid, 1 when one is not.
`

// runValidate checks each file given and reports every problem with
// file:line. Exit code 0 when all files are valid, 1 when one is not, 2 for
// bad usage.
func runValidate(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("validate-config")
	merge := fs.Bool("merge-domains", false, "in a directory, let several files define one domain (MERGE_DOMAIN_CONFIG)")
	if code, ok := parseFlags(fs, validateUsage, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() == 0 {
		return usageError(fs, stderr, "no configuration file given")
	}
	code := 0
	for _, name := range fs.Args() {
		cfg, err := config.Load(name)
		if st, serr := os.Stat(name); serr == nil && st.IsDir() {
			cfg, _, err = config.LoadDir(name, config.DirOptions{Merge: *merge})
		}
		if err != nil {
			fmt.Fprintln(stderr, err)
			code = 1
			continue
		}
		store := "in-process store (limits per process)"
		if cfg.Valkey != nil {
			store = fmt.Sprintf("valkey %v", cfg.Valkey.Addresses)
			if len(cfg.Valkey.Addresses) == 0 {
				store = "valkey (addresses from --valkey)"
			}
		}
		fmt.Fprintf(stdout, "%s: ok: %d policies, %d domains, %s\n", name, len(cfg.Policies), len(cfg.Domains), store)
	}
	return code
}
