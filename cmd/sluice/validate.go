package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/server"
	"github.com/sluicehq/sluice/cmd/sluice/internal/store"
	"github.com/sluicehq/sluice/memstore"
)

const validateUsage = `usage: sluice validate-config [--secrets] [--merge-domains] FILE|DIR [FILE|DIR...]

Checks each configuration file as sluice serve would load it and reports
every problem with file:line:column. A directory is read as
envoyproxy/ratelimit's configuration directory (every file one domain).
With --secrets it also reads, from this environment and file system, the
secrets the file names, as sluice serve does when it starts, and reports
what serve would refuse: an admin token missing or shorter than 16
characters, a Valkey password or TLS file that cannot be read. Warnings
(such as a forward_auth route a client escapes by sending a new header value
on each request) go to standard error and do not change the exit code.
Exit code 0 when all are valid, 1 when one is not.

flags:
`

// runValidate checks each file given and reports every problem with
// file:line. Exit code 0 when all files are valid, 1 when one is not, 2 for
// bad usage.
func runValidate(_ context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) int {
	fs := newFlags("validate-config")
	secrets := fs.Bool("secrets", false, "also read the secrets the file names (admin token, Valkey password, TLS files) as serve does at start")
	merge := fs.Bool("merge-domains", false, "in a directory, let several files define one domain (MERGE_DOMAIN_CONFIG)")
	if code, ok := parseFlags(fs, validateUsage, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() == 0 {
		return usageError(fs, stderr, "no configuration file given")
	}
	code := 0
	for _, name := range fs.Args() {
		if !validateOne(name, *merge, *secrets, env, stdout, stderr) {
			code = 1
		}
	}
	return code
}

// validateOne checks one configuration file or directory, reporting its
// problems on stderr, or its warnings on stderr and a summary on stdout;
// false when it is not valid.
func validateOne(name string, merge, secrets bool, env func(string) (string, bool), stdout, stderr io.Writer) bool {
	cfg, err := loadValidated(name, merge)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return false
	}
	store := storeSummary(cfg.Valkey)
	if secrets {
		if errs := startChecks(cfg, env); len(errs) > 0 {
			for _, err := range errs {
				fmt.Fprintf(stderr, "sluice serve would refuse to start: %v\n", err)
			}
			return false
		}
		store += ", secrets readable"
	}
	for _, w := range cfg.ForwardAuth.Warnings(cfg.Source) {
		fmt.Fprintln(stderr, "warning: "+w)
	}
	fmt.Fprintf(stdout, "%s: ok: %d policies, %d domains, %s\n", name, len(cfg.Policies), len(cfg.Domains), store)
	return true
}

// loadValidated loads name as serve would: a directory as
// envoyproxy/ratelimit's configuration directory, else a file.
func loadValidated(name string, merge bool) (*config.Config, error) {
	if st, err := os.Stat(name); err == nil && st.IsDir() {
		cfg, _, err := config.LoadDir(name, config.DirOptions{Merge: merge})
		return cfg, err
	}
	return config.Load(name)
}

// storeSummary names the store a configuration with Valkey section v
// decides with.
func storeSummary(v *config.Valkey) string {
	switch {
	case v == nil:
		return "in-process store (limits per process)"
	case len(v.Addresses) == 0:
		return "valkey (addresses from --valkey)"
	}
	return fmt.Sprintf("valkey %v", v.Addresses)
}

// startChecks runs what sluice serve runs on a configuration when it
// starts, besides connecting and listening: the Valkey client's options
// (password, TLS files) and the server itself (its limiters and the admin
// token), with env as the environment.
func startChecks(cfg *config.Config, env func(string) (string, bool)) []error {
	var errs []error
	if cfg.Valkey != nil {
		if _, err := store.ClientOption(cfg.Valkey, env); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", cfg.Source, err))
		}
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// New's errors name the file already.
	if _, err := server.New(cfg, server.Options{Store: memstore.New(), Env: env, Logger: quiet}); err != nil {
		errs = append(errs, err)
	}
	return errs
}
