package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
	"google.golang.org/grpc"
)

const (
	defaultListen     = "127.0.0.1:8080"
	defaultGRPCListen = "127.0.0.1:8081"
)

const serveUsage = `usage: sluice serve [--config FILE] [--listen ADDR] [--grpc-listen ADDR] [--valkey ADDR[,ADDR...]]

Answers rate-limit decisions: POST /v1/check (HTTP JSON) and Envoy's
envoy.service.ratelimit.v3.RateLimitService (gRPC). Without --config the
embedded example configuration (examples/sluice.yaml) is used. Without a
valkey section (or --valkey) counts are kept in process: limits are then per
process. SIGHUP, or a change of the file, reloads the configuration; a bad
file is rejected and the last good configuration keeps serving.

flags:
`

func runServe(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "configuration `file` (default: the embedded examples/sluice.yaml)")
	listen := fs.String("listen", defaultListen, "HTTP `address`")
	grpcListen := fs.String("grpc-listen", defaultGRPCListen, "gRPC `address` for Envoy's rate-limit protocol (\"off\" to disable)")
	valkeyAddrs := fs.String("valkey", "", "Valkey `addresses`, comma-separated (several: a cluster); overrides the config's")
	logLevel := fs.String("log-level", "info", "log `level`: debug, info, warn or error")
	shutdownTimeout := fs.Duration("shutdown-timeout", 10*time.Second, "time to finish requests in flight on SIGTERM")
	fs.Usage = func() {
		fmt.Fprint(stderr, serveUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "sluice serve: --log-level: %v\n", err)
		return 2
	}
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))

	// The configuration.
	var cfg *config.Config
	var data []byte
	var err error
	if *configPath != "" {
		data, err = os.ReadFile(*configPath)
		if err == nil {
			cfg, err = config.Parse(*configPath, data)
		}
	} else {
		data = config.DefaultYAML()
		cfg, err = config.Default()
	}
	if err != nil {
		logger.Error("configuration rejected", "err", err.Error())
		fmt.Fprintln(stderr, err)
		return 1
	}
	var overrideAddrs []string
	if set["valkey"] {
		overrideAddrs = splitAddrs(*valkeyAddrs)
		if len(overrideAddrs) == 0 {
			fmt.Fprintln(stderr, "sluice serve: --valkey: no address given")
			return 2
		}
		if cfg.Valkey == nil {
			cfg.Valkey = &config.Valkey{Timeout: sluice.DefaultTimeout, ConnectTimeout: config.DefaultConnectTimeout}
		}
		cfg.Valkey.Addresses = overrideAddrs
	}
	if cfg.Valkey != nil && len(cfg.Valkey.Addresses) == 0 {
		fmt.Fprintf(stderr, "sluice serve: %s: the valkey section lists no addresses; add addresses or pass --valkey host:port\n", cfg.Source)
		return 2
	}
	httpAddr := pick(set["listen"], *listen, cfg.Listen, defaultListen)
	grpcAddr := pick(set["grpc-listen"], *grpcListen, cfg.GRPCListen, defaultGRPCListen)

	// The store.
	opts := server.Options{Logger: logger, Env: env, ValkeyAddresses: overrideAddrs}
	if cfg.Valkey != nil {
		copt, err := server.ClientOption(cfg.Valkey, env)
		if err != nil {
			logger.Error("valkey configuration", "err", err.Error())
			return 1
		}
		vs := server.ConnectValkey(copt, logger)
		defer vs.Close()
		opts.Store, opts.StoreName = vs, "valkey"
		mode := "standalone"
		if len(cfg.Valkey.Addresses) > 1 {
			mode = "cluster"
		}
		logger.Info("using valkey", "addresses", cfg.Valkey.Addresses, "mode", mode, "tls", cfg.Valkey.TLS != nil, "timeout", cfg.Valkey.Timeout.String())
	} else {
		opts.Store, opts.StoreName = memstore.New(), "memory"
		logger.Warn("no valkey configured: using the in-process store, so limits are per process " +
			"(each replica of this service counts on its own, and counts reset on restart); " +
			"add a valkey section or --valkey host:port to share them")
	}
	if *configPath == "" {
		logger.Warn("no --config given: serving the embedded example configuration (examples/sluice.yaml)")
	}
	srv, err := server.New(cfg, opts)
	if err != nil {
		logger.Error("configuration rejected", "err", err.Error())
		fmt.Fprintln(stderr, err)
		return 1
	}
	srv.SetLoaded(data)

	// The listeners.
	hl, err := net.Listen("tcp", httpAddr)
	if err != nil {
		logger.Error("cannot listen for HTTP", "addr", httpAddr, "err", err.Error())
		return 1
	}
	httpSrv := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    32 << 10,
		ErrorLog:          log.New(slogWriter{logger}, "", 0),
	}
	var gs *grpc.Server
	var gl net.Listener
	if grpcAddr != "off" {
		gl, err = net.Listen("tcp", grpcAddr)
		if err != nil {
			hl.Close()
			logger.Error("cannot listen for gRPC", "addr", grpcAddr, "err", err.Error())
			return 1
		}
		gs = srv.NewGRPCServer()
	}

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Reloads: SIGHUP, and changes of the file. SIGHUP is caught before the
	// service says it is serving: until then its default action would kill
	// the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	errc := make(chan error, 2)
	go func() { errc <- fmt.Errorf("http: %w", httpSrv.Serve(hl)) }()
	grpcAddrShown := "off"
	if gs != nil {
		grpcAddrShown = gl.Addr().String()
		go func() { errc <- fmt.Errorf("grpc: %w", gs.Serve(gl)) }()
	}
	logger.Info("serving", "http", hl.Addr().String(), "grpc", grpcAddrShown, "store", opts.StoreName,
		"config", cfg.Source, "policies", len(cfg.Policies), "domains", len(cfg.Domains))

	if *configPath != "" {
		go func() {
			if err := srv.Watch(ctx, *configPath); err != nil {
				logger.Warn("cannot watch the configuration file; reload with SIGHUP", "file", *configPath, "err", err.Error())
			}
		}()
	}

	code := 0
loop:
	for {
		select {
		case <-ctx.Done():
			logger.Info("shutting down", "grace", shutdownTimeout.String())
			break loop
		case <-hup:
			if *configPath == "" {
				logger.Info("SIGHUP: the embedded configuration has no file to reload")
				continue
			}
			srv.Reload(*configPath, "SIGHUP")
		case err := <-errc:
			logger.Error("server stopped", "err", err.Error())
			code = 1
			break loop
		}
	}

	sctx, cancel := context.WithTimeout(context.Background(), *shutdownTimeout)
	defer cancel()
	done := make(chan struct{})
	go func() {
		if gs != nil {
			gs.GracefulStop()
		}
		close(done)
	}()
	if err := httpSrv.Shutdown(sctx); err != nil {
		logger.Warn("HTTP shutdown incomplete", "err", err.Error())
	}
	select {
	case <-done:
	case <-sctx.Done():
		gs.Stop()
	}
	logger.Info("stopped")
	return code
}

// pick chooses the flag's value when it was given, else the config's, else
// the default.
func pick(flagSet bool, flagVal, cfgVal, def string) string {
	switch {
	case flagSet:
		return flagVal
	case cfgVal != "":
		return cfgVal
	}
	return def
}

func splitAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// slogWriter sends net/http's own error log (TLS handshake errors, bad
// requests it refuses) to the structured log.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.l.Warn(strings.TrimSpace(string(p)), "source", "net/http")
	return len(p), nil
}
