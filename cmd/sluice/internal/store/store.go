// Package store opens Sluice's stores from the configuration, in one place
// for every command: the valkey-go options of a valkey section
// (ClientOption: credentials, TLS, Sentinel, timeouts, pipelining), the
// background-connecting store sluice serve decides with (Serve), and the
// connected client and store the operator commands use (Open: doctor,
// verify, keys, inspect, reset, override, bench). A refusal to
// authenticate names the settings that fix it (ExplainAuth).
package store

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/valkeyops"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/valkey-io/valkey-go"
)

// Env looks up an environment variable (nil: the process environment).
type Env = func(string) (string, bool)

// Serve opens the store sluice serve decides with: Valkey when cfg has a
// valkey section, connecting in the background (ConnectValkey) so that the
// service starts, and answers by its policies' on_failure, while Valkey is
// unreachable; else the in-process store, with a warning that limits are
// then per process. It returns the store, its name for /readyz and logs
// ("valkey", "memory") and the function that closes it. An error (a
// secret that cannot be read, a certificate that does not load) is logged
// before it is returned. extra are more options of a Valkey store (such
// as valkeystore.WithClientWrap).
func Serve(cfg *config.Config, env Env, logger *slog.Logger, extra ...valkeystore.Option) (driver.Store, string, func(), error) {
	if cfg.Valkey == nil {
		logger.Warn("no valkey configured: using the in-process store, so limits are per process " +
			"(each replica of this service counts on its own, and counts reset on restart); " +
			"add a valkey section or --valkey host:port to share them")
		return memstore.New(), "memory", func() {}, nil
	}
	copt, err := ClientOption(cfg.Valkey, env)
	if err != nil {
		logger.Error("valkey configuration", "err", err.Error())
		return nil, "", nil, err
	}
	vs, err := ConnectValkey(copt, logger, func(err error) error { return ExplainAuth(err, cfg.Valkey) }, extra...)
	if err != nil {
		logger.Error("valkey configuration", "err", err.Error())
		return nil, "", nil, err
	}
	mode := "standalone"
	switch {
	case cfg.Valkey.Sentinel != nil:
		mode = "sentinel " + cfg.Valkey.Sentinel.MasterSet
	case len(cfg.Valkey.Addresses) > 1:
		mode = "cluster"
	}
	logger.Info("using valkey", "addresses", cfg.Valkey.Addresses, "mode", mode, "tls", cfg.Valkey.TLS != nil, "timeout", cfg.Valkey.Timeout.String())
	return vs, "valkey", vs.Close, nil
}

// Conn is a connected valkey-go client and a Store on it, for the
// operator commands. Close closes both.
type Conn struct {
	Client valkey.Client
	Store  *valkeystore.Store
}

// Close closes the client (the Store does not own it).
func (c *Conn) Close() { c.Client.Close() }

// An Option adjusts Open and Dial.
type Option interface{ apply(*openOptions) }

type optionFunc func(*openOptions)

func (f optionFunc) apply(o *openOptions) { f(o) }

type openOptions struct {
	name    string
	adjust  []func(*valkey.ClientOption)
	store   []valkeystore.Option
	explain func(error) error
}

// WithClientName names the connections (CLIENT SETNAME; default
// "sluice-ops").
func WithClientName(name string) Option {
	return optionFunc(func(o *openOptions) { o.name = name })
}

// WithClientOption adjusts the valkey-go options built from the
// configuration before the client is made.
func WithClientOption(f func(*valkey.ClientOption)) Option {
	return optionFunc(func(o *openOptions) { o.adjust = append(o.adjust, f) })
}

// WithStoreOptions are the options of the Store Open makes.
func WithStoreOptions(opts ...valkeystore.Option) Option {
	return optionFunc(func(o *openOptions) { o.store = append(o.store, opts...) })
}

// WithExplain turns a connection error into the one reported (default:
// ExplainAuth with the configuration's valkey section, naming its
// settings), such as for a command whose flags, not a configuration file,
// hold the credentials.
func WithExplain(f func(error) error) Option {
	return optionFunc(func(o *openOptions) { o.explain = f })
}

// Dial opens a client to the Valkey of v, as sluice serve would (same
// credentials, TLS and timeouts: ClientOption), and checks that it answers
// PING within v.ConnectTimeout (at least a second). Several addresses make
// a cluster client.
func Dial(ctx context.Context, v *config.Valkey, env Env, opts ...Option) (valkey.Client, error) {
	if !valkeyops.Configured(v) {
		return nil, valkeyops.ErrNoValkey
	}
	o := openOptions{name: "sluice-ops", explain: func(err error) error { return ExplainAuth(err, v) }}
	for _, f := range opts {
		f.apply(&o)
	}
	opt, err := ClientOption(v, env)
	if err != nil {
		return nil, err
	}
	opt.ClientName = o.name
	for _, f := range o.adjust {
		f(&opt)
	}
	c, err := valkey.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to valkey %s: %w", valkeyops.Describe(v), o.explain(err))
	}
	pctx, cancel := context.WithTimeout(ctx, max(v.ConnectTimeout, time.Second))
	defer cancel()
	if err := c.Do(pctx, c.B().Ping().Build()).Error(); err != nil {
		c.Close()
		return nil, fmt.Errorf("valkey %s does not answer PING: %w", valkeyops.Describe(v), o.explain(err))
	}
	return c, nil
}

// Open dials the Valkey of v (Dial) and makes a Store on the client.
func Open(ctx context.Context, v *config.Valkey, env Env, opts ...Option) (*Conn, error) {
	client, err := Dial(ctx, v, env, opts...)
	if err != nil {
		return nil, err
	}
	var o openOptions
	for _, f := range opts {
		f.apply(&o)
	}
	st, err := valkeystore.New(client, o.store...)
	if err != nil {
		client.Close()
		return nil, err
	}
	return &Conn{Client: client, Store: st}, nil
}
