package server

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/envoy"
	"google.golang.org/grpc"
)

// The server's side of Envoy's protocol (package envoy): the routes and
// the gRPC service it registers, and what package envoy asks of it
// (envoy.Server: the configuration being served, its policies and the
// limiters of per-request overrides).

// envoyRoutes registers envoyproxy/ratelimit's HTTP endpoints (/json,
// /healthcheck, /rlconfig) with route.
func (s *Server) envoyRoutes(route func(pattern, name string, h http.HandlerFunc)) {
	s.envoy.Routes(route)
}

// DebugHandler is envoyproxy/ratelimit's debug port: /rlconfig,
// /healthcheck and /metrics.
func (s *Server) DebugHandler() http.Handler {
	mux := http.NewServeMux()
	route := func(pattern, name string, h http.HandlerFunc) { mux.Handle(pattern, s.instrument(name, h)) }
	s.envoyRoutes(route)
	route("GET /metrics", "metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}).ServeHTTP)
	return mux
}

// NewGRPCServer returns a gRPC server with Envoy's RateLimitService, the
// standard health service and server reflection registered
// (envoy.Service.NewGRPCServer).
func (s *Server) NewGRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	return s.envoy.NewGRPCServer(opts...)
}

// RegisterGRPC registers Envoy's RateLimitService on g.
func (s *Server) RegisterGRPC(g grpc.ServiceRegistrar) { s.envoy.RegisterGRPC(g) }

// envoyView is the Server as package envoy sees it.
type envoyView struct{ s *Server }

func (v envoyView) Current() envoy.State {
	if st := v.s.state.Load(); st != nil {
		return st
	}
	return nil
}

func (v envoyView) NoteRefused(p *config.Policy, key string, res sluice.Result) {
	v.s.refused.note(p, key, res)
}

func (st *state) Config() *config.Config { return st.cfg }

func (st *state) Policy(name string) envoy.Policy {
	if p := st.policies[name]; p != nil {
		return p
	}
	return nil
}

func (st *state) Override(limit int64, window time.Duration, counting config.Counting) (envoy.Policy, error) {
	p, err := st.overrides.get(overrideKey{limit: limit, window: window, counting: counting})
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (p *policy) Config() *config.Policy   { return p.cfg }
func (p *policy) Limiter() *sluice.Limiter { return p.limiter }
func (p *policy) Shadow() *sluice.Limiter  { return p.shadow }
