package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/sluicehq/sluice/internal/config"
)

// runValidate checks each file given and reports every problem with
// file:line. Exit code 0 when all files are valid, 1 when one is not, 2 for
// bad usage.
func runValidate(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sluice validate-config FILE [FILE...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
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
