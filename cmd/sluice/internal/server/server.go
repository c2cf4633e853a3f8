// Package server is sluice serve: decisions over HTTP JSON (and Envoy's
// rate-limit protocol, package envoy, which it registers), for the
// policies of a config.Config, with metrics, health checks and hot reload.
package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/envoy"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/sluiceprom"
	"github.com/sluicehq/sluice/waiting"
)

// Defaults for Options.
const (
	DefaultMaxBodyBytes = 64 << 10
	// MaxKeyLen is the longest key accepted in a check, in bytes. Longer
	// keys are refused (400) rather than silently hashed: they are almost
	// always a client bug (a whole request body used as a key).
	MaxKeyLen = 1024
	// MaxChecks is the most checks one POST /v1/check may carry.
	MaxChecks = 32
)

// Options configures a Server.
type Options struct {
	// Store keeps the counts. Required.
	Store driver.Store
	// StoreName describes the store in /readyz and logs ("memory",
	// "valkey").
	StoreName string
	// Logger receives structured logs (default slog.Default()).
	Logger *slog.Logger
	// Registry receives the server's metrics (default: a new registry with
	// the Go and process collectors). Handler serves it on /metrics.
	Registry *prometheus.Registry
	// Observer, when set, is told of every decision besides the server's
	// own metrics (package sluiceprom, registered in Registry).
	Observer sluice.Observer
	// Env looks up environment variables for secrets named by the config
	// (default os.LookupEnv).
	Env func(string) (string, bool)
	// MaxBodyBytes caps request bodies (default DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// ValkeyAddresses, from the command line, replace the configuration's
	// valkey addresses, in every configuration applied.
	ValkeyAddresses []string
	// Envoy tunes Envoy's rate-limit protocol.
	Envoy envoy.Options
	// Adjust, when set, completes every configuration applied, such as
	// with settings from the environment (a valkey section, a prefix).
	Adjust func(*config.Config)
	// ConfigDir, when set, says that the path given to Reload and Watch is
	// a configuration directory (config.LoadDir), read with these options.
	ConfigDir *config.DirOptions
	// DirPoll is how often a watched configuration directory is read
	// besides its watch (default DirPollInterval).
	DirPoll time.Duration
	// PerSecond, when set, keeps the counters of the policies
	// envoy.PerSecondPolicy selects (REDIS_PERSECOND, persecond.go), whose
	// per-request overrides decide within PerSecondTimeout.
	PerSecond        driver.Store
	PerSecondTimeout time.Duration
}

// Server answers decisions for the policies of its current configuration.
// Apply replaces the configuration atomically: requests in flight finish
// with the one they started with.
type Server struct {
	opts    Options
	log     *slog.Logger
	reg     *prometheus.Registry
	metrics *metrics
	grants  grantCarry // the grant counters of the limiters reloads replaced (grants.go)
	// envoy answers Envoy's protocol (package envoy).
	envoy   *envoy.Service
	obs     sluice.Observer
	refused *refusedKeys
	// lastReload is the last Reload's outcome; nil before the first.
	lastReload atomic.Pointer[reloadResult]
	wrongToken logThrottle // admin requests with a wrong token
	state      atomic.Pointer[state]
	applyMu    sync.Mutex
	// waiters are the places of the requests waiting for admission
	// (wait.go), counted in waitsTotal: they outlive the configurations (a
	// reload changes their bounds, not who waits).
	waiters    *waiting.Places[waitKey]
	waitsTotal *prometheus.CounterVec
	// lastSum is the SHA-256 of the configuration file being served.
	lastSum    [32]byte
	lastSumSet bool
}

// state is one applied configuration.
type state struct {
	cfg      *config.Config
	policies map[string]*policy
	order    []*policy
	// adminHash is the SHA-256 of the admin token; nil when admin routes
	// are off. Comparing digests in constant time hides the token's length
	// too.
	adminHash []byte
	// keyHashSecret keys the hashes of show_keys hashed (KeyHashSecret of
	// the admin token); nil without one.
	keyHashSecret []byte
	loadedAt      time.Time
	overrides     *overrideCache
	// forward is nil when forward_auth is not configured.
	forward *forwardAuth
}

// policy is a configured policy and its limiters.
type policy struct {
	cfg     *config.Policy
	limiter *sluice.Limiter
	// shadow is the same limiter in shadow mode, sharing its state, for
	// Envoy descriptors with shadow_mode.
	shadow *sluice.Limiter
}

// New returns a Server for cfg. It fails when a policy cannot be built or a
// secret the config names cannot be read.
func New(cfg *config.Config, opts Options) (*Server, error) {
	if opts.Store == nil {
		return nil, errors.New("server: nil store")
	}
	opts.setDefaults()
	s := &Server{opts: opts, log: opts.Logger, refused: newRefusedKeys(), wrongToken: logThrottle{interval: 10 * time.Second}, waiters: newWaiters()}
	if err := s.setUpMetrics(); err != nil {
		return nil, err
	}
	if err := s.Apply(cfg); err != nil {
		return nil, err
	}
	s.envoy.ConfigLoaded(true)
	return s, nil
}

// setDefaults fills in the options left zero: the default logger, body
// bound and store name.
func (opts *Options) setDefaults() {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.StoreName == "" {
		opts.StoreName = "unknown"
	}
}

// setUpMetrics sets up the registry and what reports to it: the server's
// metrics, the Valkey connection's, Envoy's, and the decisions'.
func (s *Server) setUpMetrics() error {
	s.reg = s.opts.Registry
	if s.reg == nil {
		s.reg = newRegistry()
	}
	s.metrics = newMetrics(s.reg)
	s.reg.MustRegister(s.waitMetrics()...)
	if srcs := valkeySources(s.opts.Store, s.opts.PerSecond); len(srcs) > 0 {
		s.reg.MustRegister(newValkeyCollector(srcs))
	}
	s.envoy = envoy.New(envoyView{s}, s.reg, s.log, s.opts.MaxBodyBytes, s.opts.Envoy)
	// Decisions by limiter and outcome, store errors and decision latency:
	// sluice_decisions_total, sluice_store_errors_total,
	// sluice_decision_duration_seconds; and the grants'.
	pm, err := sluiceprom.New(s.reg)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	// The grants of policies with grants: sluice_grant_* (grants.go).
	pm.GrantsFunc(s.GrantStats)
	s.obs = combine(pm, s.opts.Observer)
	return nil
}

// Config returns the configuration being served.
func (s *Server) Config() *config.Config { return s.state.Load().cfg }

// Apply builds limiters for cfg and swaps them in. On error the current
// configuration keeps serving.
func (s *Server) Apply(cfg *config.Config) error {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	cfg = s.adjusted(cfg)
	st, err := s.build(cfg)
	if err != nil {
		return err
	}
	s.warnValkeyChange(cfg)
	s.serve(st)
	s.setWaitBounds(cfg.MaxWaiting, cfg.MaxWaitingPerKey)
	for _, w := range cfg.ForwardAuth.Warnings(cfg.Source) {
		s.log.Warn(w)
	}
	s.metrics.overrides.Set(0)
	s.refused.useSecret(st.keyHashSecret)
	s.refused.retain(st.order)
	s.setPolicyMetrics(st)
	return nil
}

// adjusted is cfg as it is served: changed by Options.Adjust, and
// connecting to Options.ValkeyAddresses when they are set.
func (s *Server) adjusted(cfg *config.Config) *config.Config {
	if cfg == nil {
		return nil
	}
	if s.opts.Adjust != nil {
		cp := *cfg
		s.opts.Adjust(&cp)
		cfg = &cp
	}
	if len(s.opts.ValkeyAddresses) > 0 {
		cfg = withValkeyAddresses(cfg, s.opts.ValkeyAddresses)
	}
	return cfg
}

// withValkeyAddresses is a copy of cfg that connects to addrs.
func withValkeyAddresses(cfg *config.Config, addrs []string) *config.Config {
	cp := *cfg
	v := config.Valkey{Timeout: sluice.DefaultTimeout, ConnectTimeout: config.DefaultConnectTimeout}
	if cfg.Valkey != nil {
		v = *cfg.Valkey
	}
	v.Addresses = addrs
	cp.Valkey = &v
	return &cp
}

// warnValkeyChange warns when cfg connects to Valkey otherwise than the
// configuration being served: the store in use is kept.
func (s *Server) warnValkeyChange(cfg *config.Config) {
	if old := s.state.Load(); old != nil && !sameValkey(old.cfg.Valkey, cfg.Valkey) {
		s.log.Warn("the valkey connection settings changed; the store in use is kept until a restart",
			"source", cfg.Source)
	}
}

// setPolicyMetrics sets the metrics of the configuration st serves: its
// policies, their decision timeouts and when it was loaded.
func (s *Server) setPolicyMetrics(st *state) {
	s.metrics.policies.Set(float64(len(st.order)))
	s.metrics.timeouts.Reset()
	for _, p := range st.order {
		s.metrics.timeouts.WithLabelValues(p.cfg.Limiter).Set(decisionTimeout(p.cfg).Seconds())
	}
	s.metrics.loadedAt.Set(float64(st.loadedAt.Unix()))
}

// sameValkey reports whether a and b connect to Valkey the same way.
func sameValkey(a, b *config.Valkey) bool {
	if (a == nil) != (b == nil) {
		return false
	}
	if a == nil {
		return true
	}
	ta, tb := a.TLS, b.TLS
	ca, cb := *a, *b
	ca.TLS, cb.TLS = nil, nil
	ca.Timeout, cb.Timeout = 0, 0 // per decision: applied on reload
	if (ta == nil) != (tb == nil) || ta != nil && *ta != *tb {
		return false
	}
	return fmt.Sprint(ca) == fmt.Sprint(cb)
}

func (s *Server) build(cfg *config.Config) (*state, error) {
	if cfg == nil {
		return nil, errors.New("server: nil config")
	}
	st := &state{cfg: cfg, policies: make(map[string]*policy, len(cfg.Policies)), loadedAt: time.Now()}
	st.overrides = s.newOverrides(cfg, st)
	for _, p := range cfg.Policies {
		pol, err := s.buildPolicy(cfg, p)
		if err != nil {
			st.closeGrants(s.log)
			return nil, err
		}
		st.policies[p.Name] = pol
		st.order = append(st.order, pol)
	}
	fwd, err := newForwardAuth(cfg.ForwardAuth, st.policies)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Source, err)
	}
	st.forward = fwd
	if err := s.setAdminToken(cfg, st); err != nil {
		return nil, err
	}
	return st, nil
}

// newOverrides is the cache of st's limiters for Envoy overrides, which
// counts its size and evictions while st is served.
func (s *Server) newOverrides(cfg *config.Config, st *state) *overrideCache {
	return newOverrideCache(s.opts.Envoy.MaxOverrides, func(k overrideKey) (*policy, error) {
		return s.buildOverride(cfg, k)
	}, func(size int, evicted bool) {
		if s.state.Load() != st {
			return // built for a configuration no longer served
		}
		s.metrics.overrides.Set(float64(size))
		if evicted {
			s.metrics.overrideEvictions.Inc()
		}
	})
}

// buildPolicy builds the limiter of policy p of cfg, and the same limiter
// in shadow mode.
func (s *Server) buildPolicy(cfg *config.Config, p *config.Policy) (*policy, error) {
	opts := []sluice.Option{
		sluice.WithName(p.Limiter),
		sluice.WithPrefix(cfg.Prefix),
		sluice.WithFailMode(p.FailMode),
		sluice.WithLogger(s.log),
		sluice.WithObserver(s.obs),
	}
	opts = append(opts, sluice.WithTimeout(decisionTimeout(p)), sluice.WithOverrides(p.Overrides),
		sluice.WithDenyCache(p.DenyCache))
	if p.WarnAt > 0 {
		opts = append(opts, sluice.WithWarning(p.WarnAt))
	}
	if p.Penalty != nil {
		opts = append(opts, sluice.WithPenalty(*p.Penalty))
	}
	for _, pl := range p.Plans {
		opts = append(opts, sluice.WithPlan(pl.Name, pl.Policy))
	}
	opts = append(opts, reservationOptions(p, s.storeOf(p))...)
	if p.Grants {
		opts = append(opts, sluice.WithGrants(p.GrantOptions))
	}
	lim, err := sluice.New(s.storeOf(p), p.Policy, append(opts, sluice.WithShadow(p.Shadow))...)
	if err != nil {
		return nil, fmt.Errorf("%s:%d: policy %q: %w", cfg.Source, p.Line, p.Name, err)
	}
	shadow, err := sluice.New(s.storeOf(p), p.Policy, append(opts, sluice.WithShadow(true))...)
	if err != nil {
		lim.Close()
		return nil, fmt.Errorf("%s:%d: policy %q: %w", cfg.Source, p.Line, p.Name, err)
	}
	return &policy{cfg: p, limiter: lim, shadow: shadow}, nil
}

// setAdminToken reads the admin token cfg names, when it has an admin
// section, and keeps in st its hash and the secret keying hashed keys.
func (s *Server) setAdminToken(cfg *config.Config, st *state) error {
	if cfg.Admin == nil {
		return nil
	}
	tok, err := cfg.Admin.Token(s.opts.Env)
	if err != nil {
		return fmt.Errorf("%s: %w", cfg.Source, err)
	}
	sum := sha256.Sum256([]byte(tok))
	st.adminHash = sum[:]
	st.keyHashSecret = KeyHashSecret(tok)
	return nil
}

// authorized reports whether token is the admin token, in constant time.
func (st *state) authorized(token string) bool {
	if st.adminHash == nil || token == "" {
		return false
	}
	sum := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(sum[:], st.adminHash) == 1
}

// Ready reports whether the server can decide: a configuration is loaded
// and the store answers.
func (s *Server) Ready(ctx context.Context) error {
	if s.state.Load() == nil {
		return errors.New("no configuration loaded")
	}
	if p, ok := s.opts.Store.(interface{ Ping(context.Context) error }); ok {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if err := p.Ping(ctx); err != nil {
			return fmt.Errorf("store %s: %w", s.opts.StoreName, err)
		}
	}
	return s.perSecondReady(ctx)
}

// Registry returns the registry the server's metrics are in.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// decisionTimeout is the time a decision of p may take before its
// on_failure decides: its own timeout, else the valkey section's (applied
// by config), else sluice.DefaultTimeout.
func decisionTimeout(p *config.Policy) time.Duration {
	if p.Timeout > 0 {
		return p.Timeout
	}
	return sluice.DefaultTimeout
}
