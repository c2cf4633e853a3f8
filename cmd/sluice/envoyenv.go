package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/valkeystore"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/envoy"
	"github.com/sluicehq/sluice/cmd/sluice/internal/server"
)

// sluice serve under envoyproxy/ratelimit's environment (envoy.ReadEnv
// reads it; docs/migrating-from-envoy-ratelimit.md has the table).

// readEnvironment applies envoyproxy/ratelimit's environment when in use
// (no --config, and its variables set), and notes a --config directory.
// Flags given explicitly win over the environment. It returns an exit code,
// 0 to go on.
func (f *serveFlags) readEnvironment(env func(string) (string, bool), stderr io.Writer) int {
	if f.configPath == "" && envoy.InEnv(env) {
		if code := f.readEnvoyEnv(env, stderr); code != 0 {
			return code
		}
	}
	return f.readDirOptions(env, stderr)
}

// readEnvoyEnv reads envoyproxy/ratelimit's environment into f: its
// configuration directory, and its addresses and log level where no flag
// set them. It returns an exit code, 0 to go on.
func (f *serveFlags) readEnvoyEnv(env func(string) (string, bool), stderr io.Writer) int {
	e, err := envoy.ReadEnv(env)
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 2
	}
	f.envoy = e
	if e.XDS == nil {
		f.configPath = e.Dir
	}
	f.applyEnvoyDefaults(e)
	if e.Prefix != "" && !envoy.ValidPrefix(e.Prefix) {
		fmt.Fprintf(stderr, "sluice serve: CACHE_KEY_PREFIX=%q: 1 to 64 characters without braces or spaces\n", e.Prefix)
		return 2
	}
	return 0
}

// applyEnvoyDefaults takes the environment's listen addresses and log
// level for the flags not given explicitly. The addresses then count as
// given: they win over the defaults.
func (f *serveFlags) applyEnvoyDefaults(e *envoy.Env) {
	if !f.set["listen"] {
		f.listen, f.set["listen"] = e.HTTPAddr, true
	}
	if !f.set["grpc-listen"] {
		f.grpcListen, f.set["grpc-listen"] = e.GRPCAddr, true
	}
	if !f.set["log-level"] {
		f.logLevel = e.LogLevel
	}
}

// readDirOptions notes how a --config directory is read: as the
// envoyproxy/ratelimit environment in use says, else as its variables
// (when set) say. It returns an exit code, 0 to go on.
func (f *serveFlags) readDirOptions(env func(string) (string, bool), stderr io.Writer) int {
	if f.configPath == "" {
		return 0
	}
	if st, err := os.Stat(f.configPath); err != nil || !st.IsDir() {
		return 0
	}
	if f.envoy != nil {
		o := f.envoy.DirOptions
		f.dirOpts = &o
		return 0
	}
	o, err := envoy.ReadDirOptions(env)
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 2
	}
	f.dirOpts = &o
	return 0
}

// newLogger makes the logger: JSON, or text under LOG_FORMAT=text.
func (f *serveFlags) newLogger(stderr io.Writer) (*slog.Logger, int) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		fmt.Fprintf(stderr, "sluice serve: --log-level: %v\n", err)
		return nil, 2
	}
	o := &slog.HandlerOptions{Level: level}
	if f.envoy != nil && f.envoy.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(stderr, o)), 0
	}
	return slog.New(slog.NewJSONHandler(stderr, o)), 0
}

// serverOptions are the server's options from the flags and the
// environment.
func (f *serveFlags) serverOptions(cfg *config.Config, env func(string) (string, bool), logger *slog.Logger) server.Options {
	opts := server.Options{Logger: logger, Env: env, ConfigDir: f.dirOpts,
		Envoy: envoy.Options{MaxDescriptors: f.maxDescriptors, MaxOverrides: f.maxOverrides}}
	if e := f.envoy; e != nil {
		opts.Env = e.LookupEnv
		opts.Envoy.ShadowMode = e.Options.ShadowMode
		opts.Envoy.StopIncrementWhenOverLimit = e.Options.StopIncrementWhenOverLimit
		opts.Envoy.ResponseDynamicMetadata = e.Options.ResponseDynamicMetadata
		opts.Envoy.NearLimitRatio = e.Options.NearLimitRatio
		opts.Envoy.QuotaMode = e.Options.QuotaMode
		opts.Envoy.MaxConnectionAge, opts.Envoy.MaxConnectionAgeGrace = e.Options.MaxConnectionAge, e.Options.MaxConnectionAgeGrace
		opts.Envoy.ExtraLabels = e.Options.ExtraLabels
		opts.Envoy.LocalCacheBytes = e.Options.LocalCacheBytes
		opts.Adjust = e.Adjust
		for _, n := range e.Notes {
			logger.Warn("envoyproxy/ratelimit environment: " + n)
		}
		logger.Info("reading envoyproxy/ratelimit's environment", "config_dir", e.Dir, "merge_domain_config", e.DirOptions.Merge)
	}
	if f.set["valkey"] {
		opts.ValkeyAddresses = cfg.Valkey.Addresses
	}
	return opts
}

// waitConnected waits, in upstream's mode, for the first connection of
// store (named name) before the ports open, as envoyproxy/ratelimit opens
// none before its Redis pools connect: stop is true when the start ends
// here (REDIS_STARTUP_MAX_ELAPSED_TIME passed: code 1; a signal: 0). A
// store that is not lazily connected (or nil) is not waited for.
func (f *serveFlags) waitConnected(ctx context.Context, name string, store driver.Store, logger *slog.Logger) (code int, stop bool) {
	lz, ok := store.(interface {
		Wait(context.Context) (*valkeystore.Store, error)
	})
	if !ok {
		return 0, false
	}
	ctx, cancel := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	if d := f.envoy.StartupMaxElapsed; d > 0 {
		var c context.CancelFunc
		ctx, c = context.WithTimeout(ctx, d)
		defer c()
	}
	logger.Info("waiting for the first connection to " + name + " before opening the ports")
	if _, err := lz.Wait(ctx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			logger.Error(name+" not connected within REDIS_STARTUP_MAX_ELAPSED_TIME", "wait", f.envoy.StartupMaxElapsed.String())
			return 1, true
		}
		return 0, true // stopped by a signal before serving
	}
	return 0, false
}

// envoyStartup starts as envoyproxy/ratelimit does, under its environment:
// no port opens before the first connection of the store (and of the
// per-second store, with REDIS_PERSECOND) (so that
// /healthcheck and the gRPC health service say serving only once Valkey
// answers), waiting at most REDIS_STARTUP_MAX_ELAPSED_TIME (0: until
// SIGTERM); and with REDIS_HEALTH_CHECK_ACTIVE_CONNECTION, both say not
// serving while the store does not answer a PING. It returns an exit code,
// 0 to go on.
func (f *serveFlags) envoyStartup(ctx context.Context, st driver.Store, opts *server.Options, logger *slog.Logger) (code int, stop bool) {
	if f.envoy == nil {
		return 0, false
	}
	for _, w := range []struct {
		name  string
		store driver.Store
	}{{"valkey", st}, {"the per-second valkey (REDIS_PERSECOND_URL)", opts.PerSecond}} {
		if code, stop := f.waitConnected(ctx, w.name, w.store, logger); stop {
			return code, true
		}
	}
	if f.envoy.HealthCheckActiveConnection {
		opts.Envoy.StoreHealth = storeHealth(st, opts.PerSecond)
	}
	return 0, false
}

// storeHealth is the health check of REDIS_HEALTH_CHECK_ACTIVE_CONNECTION:
// each of stores that can be pinged (the per-second one too) answers a
// PING within a second; nil when none can.
func storeHealth(stores ...driver.Store) func(context.Context) error {
	type pinger interface{ Ping(context.Context) error }
	var ps []pinger
	for _, st := range stores {
		if p, ok := st.(pinger); ok {
			ps = append(ps, p)
		}
	}
	if len(ps) == 0 {
		return nil
	}
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		for _, p := range ps {
			if err := p.Ping(ctx); err != nil {
				return err
			}
		}
		return nil
	}
}
