// Package envoy is sluice serve's compatibility with envoyproxy/ratelimit:
// Envoy's rate-limit gRPC service (RateLimitService/ShouldRateLimit), its
// HTTP endpoints (POST /json, GET /healthcheck, GET /rlconfig) and its
// metrics (ratelimit_service_*), deciding with the policies of the
// configuration the server serves.
//
// The package knows the server only through Server: the configuration
// being served (State: its domains, its policies by name, and the limiters
// of per-request overrides) and where refusals are noted. The server
// builds the limiters and registers the routes and the gRPC service.
package envoy

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	problemjson "github.com/sluicehq/sluice/cmd/sluice/internal/problem"
)

// Server is what Envoy's protocol needs of the service.
type Server interface {
	// Current returns the configuration being served, nil before the
	// first: a call decides wholly under the one it got.
	Current() State
	// NoteRefused tells the server of a decision of policy p for key (the
	// most refused keys it reports).
	NoteRefused(p *config.Policy, key string, res sluice.Result)
}

// State is one configuration being served.
type State interface {
	// Config is the configuration: its domains.
	Config() *config.Config
	// Policy returns the named policy, nil when there is none.
	Policy(name string) Policy
	// Override returns the limiter of a per-request limit override
	// (RateLimitDescriptor.limit): limit per window, counted as counting
	// says. The server bounds how many it keeps.
	Override(limit int64, window time.Duration, counting config.Counting) (Policy, error)
}

// Policy is a configured policy and its limiters.
type Policy interface {
	Config() *config.Policy
	Limiter() *sluice.Limiter
	// Shadow is the same limiter in shadow mode, sharing its state, for
	// descriptors with shadow_mode.
	Shadow() *sluice.Limiter
}

// Service answers Envoy's protocol for a Server.
type Service struct {
	srv     Server
	opts    Options
	log     *slog.Logger
	maxBody int64
	stats   *envoyStats
	local   *localCache // nil unless Options.LocalCacheBytes
}

// New returns the Service of srv, its metrics registered in reg; maxBody
// caps the bodies of POST /json.
func New(srv Server, reg prometheus.Registerer, log *slog.Logger, maxBody int64, opts Options) *Service {
	if len(opts.ExtraLabels) > 0 {
		reg = prometheus.WrapRegistererWith(opts.ExtraLabels, reg)
	}
	s := &Service{srv: srv, opts: opts, log: log, maxBody: maxBody,
		stats: newEnvoyStats(reg, opts.NearLimitRatio, opts.MaxMetricSeries)}
	if opts.LocalCacheBytes > 0 {
		s.local = newLocalCache(opts.LocalCacheBytes, reg)
	}
	return s
}

// ConfigLoaded counts a configuration loaded and applied (ok) or rejected
// (ratelimit_service_config_load_success, _error).
func (s *Service) ConfigLoaded(ok bool) {
	if ok {
		s.stats.loadSuccess.Inc()
	} else {
		s.stats.loadError.Inc()
	}
}

// problem writes an RFC 9457 problem+json answer (package problem: the
// one writer of the service's problem bodies).
func problem(w http.ResponseWriter, status int, detail string) { problemjson.Write(w, status, detail) }
