package main

import (
	"log/slog"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/server"
	"github.com/sluicehq/sluice/cmd/sluice/internal/store"
)

// openPerSecond opens the per-second Valkey of envoyproxy/ratelimit's
// REDIS_PERSECOND=true into opts (connecting in the background, as the
// main one); it returns the function that closes it, a no-op when there
// is none. An error is logged by store.Serve.
func (f *serveFlags) openPerSecond(opts *server.Options, logger *slog.Logger) (func(), error) {
	if f.envoy == nil || f.envoy.PerSecond == nil {
		return func() {}, nil
	}
	ps := f.envoy.PerSecond
	st, _, closeStore, err := store.Serve(&config.Config{Valkey: ps}, opts.Env, logger.With("valkey", "per-second"))
	if err != nil {
		return nil, err
	}
	opts.PerSecond, opts.PerSecondTimeout = st, ps.Timeout
	return closeStore, nil
}
