package main

import (
	"context"
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
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/envoy"
	"github.com/sluicehq/sluice/cmd/sluice/internal/server"
	"github.com/sluicehq/sluice/cmd/sluice/internal/store"
	"google.golang.org/grpc"
)

const (
	defaultListen     = "127.0.0.1:8080"
	defaultGRPCListen = "127.0.0.1:8081"
)

const serveUsage = `usage: sluice serve [--config FILE|DIR] [--listen ADDR] [--grpc-listen ADDR] [--valkey ADDR[,ADDR...]]

Answers rate-limit decisions: POST /v1/check (HTTP JSON) and Envoy's
envoy.service.ratelimit.v3.RateLimitService (gRPC). Without --config the
embedded example configuration (examples/sluice.yaml) is used, unless
envoyproxy/ratelimit's environment is set (RUNTIME_ROOT, RUNTIME_SUBDIRECTORY
or REDIS_URL): then its variables and configuration directory are read, as
the table of docs/migrating-from-envoy-ratelimit.md says. A directory holds envoyproxy/ratelimit files, one
domain each. Without a valkey section (or --valkey) counts are kept in
process: limits are then per process. SIGHUP, or a change of the file or
directory, reloads the configuration; a bad one is rejected and the last good
configuration keeps serving.

flags:
`

// serveFlags are sluice serve's command line.
type serveFlags struct {
	configPath, listen, grpcListen, valkeyAddrs, logLevel string
	shutdownTimeout                                       time.Duration
	maxDescriptors, maxOverrides                          int
	// set holds the flags given explicitly.
	set map[string]bool
	// envoy is envoyproxy/ratelimit's environment, nil when not in use.
	envoy *envoy.Env
	// dirOpts is set when configPath is a directory.
	dirOpts *config.DirOptions
	// xds is the configuration's xDS source (xds.go), nil when not in use.
	xds *xdsSource
}

func runServe(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) int {
	f, code := parseServeFlags(args, stdout, stderr)
	if f == nil {
		return code
	}
	if code := f.readEnvironment(env, stderr); code != 0 {
		return code
	}
	logger, code := f.newLogger(stderr)
	if logger == nil {
		return code
	}
	_, stopGC := tuneGC(env, logger)
	defer stopGC()
	tel, code := startTelemetry(env, logger, stderr)
	if tel == nil {
		return code
	}
	defer tel.shutdown(logger)
	xctx, stopXDS := context.WithCancel(ctx)
	defer stopXDS()
	if code := f.startXDS(xctx, logger, stderr); code != 0 {
		return code
	}
	cfg, data, code := loadServeConfig(f, logger, stderr)
	if cfg == nil {
		return code
	}
	opts := f.serverOptions(cfg, env, logger)
	st, storeName, closeStore, err := store.Serve(cfg, opts.Env, logger, tel.storeOptions()...)
	if err != nil {
		return 1
	}
	defer closeStore()
	opts.Store, opts.StoreName = st, storeName
	opts.Observer = tel.observer(st, logger)
	closePerSecond, err := f.openPerSecond(&opts, logger)
	if err != nil {
		return 1
	}
	defer closePerSecond()
	if code, stop := f.envoyStartup(ctx, st, &opts, logger); stop {
		return code
	}
	srv, err := f.newServer(cfg, data, opts, stderr)
	f.xds.served(srv, err)
	if err != nil {
		return 1
	}
	if err := tel.observeGrants(srv.GrantStats, logger); err != nil {
		srv.Close()
		return 1
	}
	l, err := listen(srv, cfg, f, logger)
	if err != nil {
		return 1
	}
	tel.instrument(l, srv)
	return l.serve(ctx, srv, cfg, f, opts.StoreName, logger)
}

// newServer builds the server of cfg, noting data as the configuration
// loaded (its sum for a directory); an error when the server refuses the
// configuration, logged and printed on stderr.
func (f *serveFlags) newServer(cfg *config.Config, data []byte, opts server.Options, stderr io.Writer) (*server.Server, error) {
	logger := opts.Logger
	if f.configPath == "" && f.xds == nil {
		logger.Warn("no --config given: serving the embedded example configuration (examples/sluice.yaml)")
	}
	srv, err := server.New(cfg, opts)
	if err != nil {
		logger.Error("configuration rejected", "err", err.Error())
		fmt.Fprintln(stderr, err)
		return nil, err
	}
	if f.dirOpts != nil {
		srv.SetLoadedSum(data)
	} else {
		srv.SetLoaded(data)
	}
	return srv, nil
}

// parseServeFlags parses the command line; nil and an exit code when the
// command should stop (help, or a bad flag).
func parseServeFlags(args []string, stdout, stderr io.Writer) (*serveFlags, int) {
	fs := newFlags("serve")
	f := &serveFlags{set: map[string]bool{}}
	fs.StringVar(&f.configPath, "config", "", "configuration `file` (default: the embedded examples/sluice.yaml)")
	fs.StringVar(&f.listen, "listen", defaultListen, "HTTP `address`")
	fs.StringVar(&f.grpcListen, "grpc-listen", defaultGRPCListen, "gRPC `address` for Envoy's rate-limit protocol (\"off\" to disable)")
	fs.StringVar(&f.valkeyAddrs, "valkey", "", "Valkey `addresses`, comma-separated (several: a cluster); overrides the config's")
	fs.StringVar(&f.logLevel, "log-level", "info", "log `level`: debug, info, warn or error")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 10*time.Second, "time to finish requests in flight on SIGTERM")
	fs.IntVar(&f.maxDescriptors, "max-descriptors", envoy.DefaultMaxDescriptors, "most descriptors in one Envoy call (more: INVALID_ARGUMENT)")
	fs.IntVar(&f.maxOverrides, "max-overrides", server.DefaultMaxOverrides, "most limiters cached for Envoy's per-request limit overrides (least recently used evicted)")
	if code, ok := parseNoArgs(fs, serveUsage, args, stdout, stderr); !ok {
		return nil, code
	}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	return f, 0
}

// loadServeConfig reads the configuration (the file, or the embedded
// example) and applies --valkey; nil and an exit code when it is refused.
func loadServeConfig(f *serveFlags, logger *slog.Logger, stderr io.Writer) (*config.Config, []byte, int) {
	cfg, data, err := f.readConfig()
	if err != nil {
		logger.Error("configuration rejected", "err", err.Error())
		fmt.Fprintln(stderr, err)
		return nil, nil, 1
	}
	if f.set["valkey"] && !f.applyValkeyFlag(cfg, stderr) {
		return nil, nil, 2
	}
	if cfg.Valkey != nil && len(cfg.Valkey.Addresses) == 0 && cfg.Valkey.Sentinel == nil {
		fmt.Fprintf(stderr, "sluice serve: %s: the valkey section lists no addresses; add addresses or pass --valkey host:port\n", cfg.Source)
		return nil, nil, 2
	}
	return cfg, data, 0
}

// applyValkeyFlag makes --valkey's addresses cfg's; false, reported on
// stderr, when it names none.
func (f *serveFlags) applyValkeyFlag(cfg *config.Config, stderr io.Writer) bool {
	addrs := splitAddrs(f.valkeyAddrs)
	if len(addrs) == 0 {
		fmt.Fprintln(stderr, "sluice serve: --valkey: no address given")
		return false
	}
	setValkeyAddresses(cfg, addrs)
	return true
}

// readConfig reads the configuration --config names (a directory, as
// its options and the envoyproxy/ratelimit environment say; or a file),
// else the embedded example, and returns it with the bytes read.
func (f *serveFlags) readConfig() (*config.Config, []byte, error) {
	switch {
	case f.xds != nil:
		cfg := f.xds.firstConfig()
		f.envoy.Adjust(cfg)
		return cfg, nil, nil
	case f.dirOpts != nil:
		cfg, data, err := config.LoadDir(f.configPath, *f.dirOpts)
		if err == nil && f.envoy != nil {
			f.envoy.Adjust(cfg)
		}
		return cfg, data, err
	case f.configPath != "":
		data, err := os.ReadFile(f.configPath)
		if err != nil {
			return nil, nil, err
		}
		cfg, err := config.Parse(f.configPath, data)
		return cfg, data, err
	}
	cfg, err := config.Default()
	return cfg, config.DefaultYAML(), err
}

// setValkeyAddresses makes addrs the Valkey addresses of cfg, adding a
// valkey section with the default timeouts when it has none.
func setValkeyAddresses(cfg *config.Config, addrs []string) {
	if cfg.Valkey == nil {
		cfg.Valkey = &config.Valkey{Timeout: sluice.DefaultTimeout, ConnectTimeout: config.DefaultConnectTimeout}
	}
	cfg.Valkey.Addresses = addrs
}

// listeners are the HTTP and gRPC servers with their sockets; grpc is nil
// when gRPC is off.
type listeners struct {
	http  *http.Server
	httpL net.Listener
	grpc  *grpc.Server
	grpcL net.Listener
	// debug serves envoyproxy/ratelimit's debug port; nil when not in use.
	debug    *http.Server
	debugL   net.Listener
	shutdown time.Duration
	// certs is the gRPC server's certificate under GRPC_SERVER_USE_TLS
	// (grpctls.go), watched while serving; nil when not in use.
	certs *envoy.ServerCerts
}

// listen opens the sockets: the flag's address when given, else the
// config's, else the default.
func listen(srv *server.Server, cfg *config.Config, f *serveFlags, logger *slog.Logger) (*listeners, error) {
	httpAddr := pick(f.set["listen"], f.listen, cfg.Listen, defaultListen)
	grpcAddr := pick(f.set["grpc-listen"], f.grpcListen, cfg.GRPCListen, defaultGRPCListen)
	hl, err := net.Listen("tcp", httpAddr)
	if err != nil {
		logger.Error("cannot listen for HTTP", "addr", httpAddr, "err", err.Error())
		return nil, err
	}
	l := &listeners{httpL: hl, shutdown: f.shutdownTimeout, http: newHTTPServer(srv.Handler(), logger)}
	grpcOpts, err := l.grpcTLS(f, logger)
	if err != nil {
		l.closeSockets()
		return nil, err
	}
	if err := l.listenGRPC(srv, grpcAddr, logger, grpcOpts...); err != nil {
		l.closeSockets()
		return nil, err
	}
	if f.envoy != nil {
		if err := l.listenDebug(srv, f.envoy.DebugAddr, logger); err != nil {
			l.closeSockets()
			return nil, err
		}
	}
	return l, nil
}

// newHTTPServer is the HTTP server of handler, with the service's
// timeouts and header limit, logging its own errors to logger.
func newHTTPServer(handler http.Handler, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    server.HeaderReadLimit, // the handler answers past server.MaxHeaderBytes
		ErrorLog:          log.New(slogWriter{logger}, "", 0),
	}
}

// listenGRPC opens the gRPC socket at addr and makes the gRPC server;
// nothing when addr is "off".
func (l *listeners) listenGRPC(srv *server.Server, addr string, logger *slog.Logger, opts ...grpc.ServerOption) error {
	if addr == "off" {
		return nil
	}
	gl, err := net.Listen("tcp", addr)
	if err != nil {
		logger.Error("cannot listen for gRPC", "addr", addr, "err", err.Error())
		return err
	}
	l.grpcL, l.grpc = gl, srv.NewGRPCServer(opts...)
	return nil
}

// listenDebug opens envoyproxy/ratelimit's debug port at addr and makes
// its server.
func (l *listeners) listenDebug(srv *server.Server, addr string, logger *slog.Logger) error {
	dl, err := net.Listen("tcp", addr)
	if err != nil {
		logger.Error("cannot listen for the debug port", "addr", addr, "err", err.Error())
		return err
	}
	l.debugL = dl
	l.debug = &http.Server{Handler: srv.DebugHandler(), ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: log.New(slogWriter{logger}, "", 0)}
	return nil
}

// closeSockets closes the sockets opened so far, when listening failed.
func (l *listeners) closeSockets() {
	l.httpL.Close()
	if l.grpcL != nil {
		l.grpcL.Close()
	}
}

// serve runs until SIGTERM, SIGINT or a server error, reloading the
// configuration on SIGHUP and when its file changes; it returns the exit
// code.
func (l *listeners) serve(ctx context.Context, srv *server.Server, cfg *config.Config, f *serveFlags, storeName string, logger *slog.Logger) int {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// SIGHUP is caught before the service says it is serving: until then
	// its default action would kill the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	errc := make(chan error, 3)
	go func() { errc <- fmt.Errorf("http: %w", l.http.Serve(l.httpL)) }()
	grpcAddrShown, debugShown := "off", "off"
	if l.certs != nil {
		go l.certs.Watch(ctx)
	}
	if l.grpc != nil {
		grpcAddrShown = l.grpcL.Addr().String()
		go func() { errc <- fmt.Errorf("grpc: %w", l.grpc.Serve(l.grpcL)) }()
	}
	if l.debug != nil {
		debugShown = l.debugL.Addr().String()
		go func() { errc <- fmt.Errorf("debug: %w", l.debug.Serve(l.debugL)) }()
	}
	logger.Info("serving", "http", l.httpL.Addr().String(), "grpc", grpcAddrShown, "debug", debugShown, "store", storeName,
		"config", cfg.Source, "policies", len(cfg.Policies), "domains", len(cfg.Domains))
	if f.configPath != "" {
		go func() {
			if err := srv.Watch(ctx, f.configPath); err != nil {
				logger.Warn("cannot watch the configuration file; reload with SIGHUP", "file", f.configPath, "err", err.Error())
			}
		}()
	}
	code := l.wait(ctx, hup, errc, srv, f.configPath, logger)
	srv.StopWaiting() // requests waiting for admission are answered refused now
	l.stop(logger)
	srv.Close() // grants give their units back
	return code
}

// wait handles signals until the service is to stop; it returns the exit
// code.
func (l *listeners) wait(ctx context.Context, hup <-chan os.Signal, errc <-chan error, srv *server.Server, configPath string, logger *slog.Logger) int {
	for {
		select {
		case <-ctx.Done():
			logger.Info("shutting down", "grace", l.shutdown.String())
			return 0
		case <-hup:
			if configPath == "" {
				logger.Info("SIGHUP: the embedded configuration has no file to reload")
				continue
			}
			srv.Reload(configPath, "SIGHUP")
		case err := <-errc:
			logger.Error("server stopped", "err", err.Error())
			return 1
		}
	}
}

// stop lets requests in flight finish, within the shutdown timeout.
func (l *listeners) stop(logger *slog.Logger) {
	sctx, cancel := context.WithTimeout(context.Background(), l.shutdown)
	defer cancel()
	done := l.stopGRPC()
	if l.debug != nil {
		l.debug.Close()
	}
	if err := l.http.Shutdown(sctx); err != nil {
		logger.Warn("HTTP shutdown incomplete", "err", err.Error())
	}
	select {
	case <-done:
	case <-sctx.Done():
		l.grpc.Stop()
	}
	logger.Info("stopped")
}

// stopGRPC stops the gRPC server (when there is one) gracefully, in the
// background; the channel is closed once it has.
func (l *listeners) stopGRPC() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		if l.grpc != nil {
			l.grpc.GracefulStop()
		}
		close(done)
	}()
	return done
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
