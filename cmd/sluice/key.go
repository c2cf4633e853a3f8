package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/server"
)

// sluice key: from a raw identifier to the key Sluice counts.

const keyUsage = `usage: sluice key [--config FILE] [--json] SOURCE VALUE...

Prints the key Sluice counts a raw identifier under (an address, an API key,
a username), computed by the code sluice serve decides with, and the form
the dashboard's top refused keys show it in. That key is the one spelling
every command and route takes: sluice inspect, reset and override,
POST /v1/check, /v1/keys and /v1/overrides.

SOURCE says where the identifier comes from:

  key KEY             a key as an application sends it to /v1/check: as is
  client_ip ADDR      forward_auth's client_ip: ip:ADDR (IPv6 grouped by its
                      prefix, ':' escaped as \:)
  header:NAME VALUE   forward_auth's header:NAME: header:<name>:<SHA-256 of VALUE>
  claim:NAME VALUE    forward_auth's claim:NAME: claim:<name>:<SHA-256 of VALUE>
  envoy DOMAIN KEY=VALUE...
                      an Envoy descriptor: the key its matching limit counts
                      (as sluice explain prints it)

The hashed form (show_keys: hashed, the default) is keyed with the admin
token, read as sluice serve reads it (admin.token_env or token_file): only
whoever holds the token can compute it. Exit code 1 when the identifier
gives no key.

flags:
`

// keyInfo is what sluice key prints.
type keyInfo struct {
	Key string `json:"key"`
	// Policy is the policy an Envoy descriptor is counted by.
	Policy string `json:"policy,omitempty"`
	Plan   string `json:"plan,omitempty"`
	// Hashed is the key as show_keys hashed shows it; empty without an
	// admin token.
	Hashed string `json:"hashed,omitempty"`
	// Truncated is the key as show_keys truncated shows it.
	Truncated string `json:"truncated"`
	Note      string `json:"note,omitempty"`
}

// runKey is sluice key. Exit code 0 on success, 1 when the key cannot be
// made, 2 for bad usage.
func runKey(_ context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) int {
	fs := newFlags("key")
	of := addOpsFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if code, ok := parseFlags(fs, keyUsage, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() < 2 {
		return usageError(fs, stderr, "want a SOURCE and a VALUE (key, client_ip, header:NAME, claim:NAME or envoy DOMAIN KEY=VALUE...)")
	}
	cfg, err := of.load(false)
	if err != nil {
		fmt.Fprintf(stderr, "sluice key: %v\n", err)
		return 1
	}
	info, err := countedKeyOf(cfg, fs.Arg(0), fs.Args()[1:])
	if err != nil {
		return keyErrorCode(fs, err, stderr)
	}
	info.shownAs(cfg, env)
	writeOutput(stdout, &info, *asJSON, (*keyInfo).print)
	return 0
}

// keyErrorCode reports why sluice key made no key and returns the exit
// code: 2 for a misuse (with a pointer to -h), an error's own code, else 1.
func keyErrorCode(fs *flag.FlagSet, err error, stderr io.Writer) int {
	var u keyUsageError
	if errors.As(err, &u) {
		return usageError(fs, stderr, "%v", err)
	}
	fmt.Fprintf(stderr, "sluice key: %v\n", err)
	var c keyExitError
	if errors.As(err, &c) {
		return c.code
	}
	return 1
}

// keyUsageError is a misuse of sluice key's arguments.
type keyUsageError struct{ error }

// keyExitError is an error of sluice key with its own exit code.
type keyExitError struct {
	error
	code int
}

// countedKeyOf is the key a request is counted under, from SOURCE and its
// values (rest): the key itself, an Envoy descriptor, or a forward-auth
// source.
func countedKeyOf(cfg *config.Config, source string, rest []string) (keyInfo, error) {
	var info keyInfo
	switch source {
	case "key":
		if len(rest) != 1 || rest[0] == "" {
			return info, keyUsageError{errors.New("key takes one non-empty KEY")}
		}
		info.Key = rest[0]
		return info, nil
	case "envoy":
		return envoyKey(cfg, rest)
	}
	return forwardAuthKeyOf(cfg, source, rest)
}

// forwardAuthKeyOf is the key forward_auth counts the value in rest
// under, from the key source named source (client_ip, header:NAME...).
func forwardAuthKeyOf(cfg *config.Config, source string, rest []string) (keyInfo, error) {
	var info keyInfo
	src, err := config.ParseKeySource(source)
	if err != nil {
		return info, keyUsageError{fmt.Errorf("%v (or key, or envoy)", err)}
	}
	if len(rest) != 1 {
		return info, keyUsageError{fmt.Errorf("%s takes one VALUE", source)}
	}
	info.Key, err = server.ForwardAuthKey(cfg.ForwardAuth, src, rest[0])
	return info, err
}

// envoyKey is the key, policy and plan of the descriptor DOMAIN
// KEY=VALUE... in rest.
func envoyKey(cfg *config.Config, rest []string) (keyInfo, error) {
	var info keyInfo
	if len(rest) < 2 {
		return info, keyUsageError{errors.New("envoy takes a DOMAIN and at least one KEY=VALUE entry")}
	}
	dom := cfg.Domain(rest[0])
	if dom == nil {
		return info, keyExitError{fmt.Errorf("unknown domain %q: %s defines %s", rest[0], cfg.Source, orNone(domainNames(cfg))), 2}
	}
	entries, bad := parseEntries(rest[1:])
	if bad != "" {
		return info, keyUsageError{fmt.Errorf("entry %q: want KEY=VALUE", bad)}
	}
	ex := explain(cfg, dom, entries)
	if ex.Key == "" {
		return info, fmt.Errorf("the descriptor is counted by no policy: %s (sluice explain says why)", ex.Applies)
	}
	info.Key, info.Policy, info.Plan = ex.Key, ex.Policy, ex.Plan
	return info, nil
}

// shownAs fills in how show_keys shows the key: truncated, and hashed
// when an admin token is configured and readable.
func (info *keyInfo) shownAs(cfg *config.Config, env func(string) (string, bool)) {
	info.Truncated = server.TruncatedKey(info.Key)
	if cfg.Admin == nil {
		info.Note = "no admin token is configured: the top refused keys are not served, so no hash is shown"
	} else if tok, err := cfg.Admin.Token(env); err != nil {
		info.Note = fmt.Sprintf("the hashed form needs the admin token: %v", err)
	} else {
		info.Hashed = server.KeyHash(server.KeyHashSecret(tok), info.Key)
	}
}

// print writes info as text, ending with the sluice inspect command line.
func (info *keyInfo) print(w io.Writer) {
	fmt.Fprintf(w, "key        %s\n", info.Key)
	if info.Policy != "" {
		fmt.Fprintf(w, "policy     %s\n", info.Policy)
	}
	if info.Plan != "" {
		fmt.Fprintf(w, "plan       %s\n", info.Plan)
	}
	if info.Hashed != "" {
		fmt.Fprintf(w, "hashed     %s (show_keys: hashed)\n", info.Hashed)
	}
	fmt.Fprintf(w, "truncated  %s (show_keys: truncated)\n", info.Truncated)
	if info.Note != "" {
		fmt.Fprintf(w, "note       %s\n", info.Note)
	}
	pol := "POLICY"
	if info.Policy != "" {
		pol = info.Policy
	}
	fmt.Fprintf(w, "inspect    sluice inspect %s %s\n", pol, shellQuote(info.Key))
}
