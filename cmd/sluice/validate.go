package main

import (
	"context"
	"fmt"
	"io"

	"github.com/sluicehq/sluice/internal/config"
)

const validateUsage = `usage: sluice validate-config FILE [FILE...]

Checks each configuration file as sluice serve would load it and reports
every problem with file:line:column. Exit code 0 when all files are valid,
1 when one is not.
`

// runValidate checks each file given and reports every problem with
// file:line. Exit code 0 when all files are valid, 1 when one is not, 2 for
// bad usage.
func runValidate(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("validate-config")
	if code, ok := parseFlags(fs, validateUsage, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() == 0 {
		return usageError(fs, stderr, "no configuration file given")
	}
	code := 0
	for _, name := range fs.Args() {
		cfg, err := config.Load(name)
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
