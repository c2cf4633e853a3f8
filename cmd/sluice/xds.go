package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/server"
)

// sluice serve under envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW
// (envoy.XDS): the configuration comes from the management server. As
// upstream, the service waits for the first configuration before it
// serves; each one after is applied as a reload (server.ApplyPushed).

// xdsSource hands the management server's configurations to the server.
type xdsSource struct {
	first     chan *config.Config
	firstDone chan error // the outcome of serving the first
	mu        sync.Mutex
	srv       *server.Server // nil until the first is served
}

// startXDS starts taking the configuration from the management server,
// under CONFIG_TYPE=GRPC_XDS_SOTW; it returns an exit code, 0 to go on.
func (f *serveFlags) startXDS(ctx context.Context, logger *slog.Logger, stderr io.Writer) int {
	if f.envoy == nil || f.envoy.XDS == nil {
		return 0
	}
	x := &xdsSource{first: make(chan *config.Config), firstDone: make(chan error, 1)}
	f.xds = x
	apply := func(cfg *config.Config) error {
		x.mu.Lock()
		srv := x.srv
		x.mu.Unlock()
		if srv != nil {
			return srv.ApplyPushed(cfg, nil)
		}
		select {
		case x.first <- cfg:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case err := <-x.firstDone:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	refused := func(err error) {
		x.mu.Lock()
		srv := x.srv
		x.mu.Unlock()
		if srv != nil {
			srv.ApplyPushed(nil, err)
		}
	}
	xds := f.envoy.XDS
	if err := xds.Watch(ctx, logger, f.envoy.DirOptions.Merge, apply, refused); err != nil {
		logger.Error("xDS configuration source", "err", err.Error())
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 2
	}
	logger.Info("waiting for the first configuration from the xDS management server", "server", xds.ServerURL, "node", xds.Node.GetId())
	return 0
}

// firstConfig waits for the management server's first configuration,
// completed by the environment.
func (x *xdsSource) firstConfig() *config.Config {
	cfg := <-x.first
	return cfg
}

// served tells the source the outcome of serving the first
// configuration: the server that applies the next ones, or the error
// that refused it.
func (x *xdsSource) served(srv *server.Server, err error) {
	if x == nil {
		return
	}
	if err == nil {
		x.mu.Lock()
		x.srv = srv
		x.mu.Unlock()
	}
	x.firstDone <- err
}
