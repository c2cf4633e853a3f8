package main

import (
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// grpcTLS sets up the gRPC server's TLS under envoyproxy/ratelimit's
// GRPC_SERVER_USE_TLS=true (envoy.GRPCTLS): the server options, and the
// certificates serve watches (l.certs). Nothing without it; an error,
// logged, when a file does not load.
func (l *listeners) grpcTLS(f *serveFlags, logger *slog.Logger) ([]grpc.ServerOption, error) {
	if f.envoy == nil || f.envoy.GRPCTLS == nil {
		return nil, nil
	}
	tc, certs, err := f.envoy.GRPCTLS.ServerConfig(logger)
	if err != nil {
		logger.Error("gRPC server TLS", "err", err.Error())
		return nil, err
	}
	l.certs = certs
	t := f.envoy.GRPCTLS
	logger.Info("gRPC serves TLS", "cert", t.CertFile, "client_ca", t.ClientCAFile, "client_san", t.ClientSAN)
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(tc))}, nil
}
