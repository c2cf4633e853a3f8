package main

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/envoy"
	"github.com/sluicehq/sluice/cmd/sluice/internal/server"
)

// envoyproxy/ratelimit's environment: when sluice serve is given no
// --config and RUNTIME_ROOT, RUNTIME_SUBDIRECTORY or REDIS_URL is set, it
// reads the variables below as envoyproxy/ratelimit does, so that its
// deployment runs unchanged. docs/migrating-from-envoy-ratelimit.md has the table. A variable that
// asks for what sluice cannot do is refused, never ignored silently.

// envoyEnv is what the environment says.
type envoyEnv struct {
	dir     string
	dirOpts config.DirOptions
	valkey  *config.Valkey
	// env answers the synthetic variable holding REDIS_AUTH's password.
	env                       func(string) (string, bool)
	httpAddr, grpcAddr, debug string
	logLevel, logFormat       string
	prefix                    string
	envoy                     envoy.Options
	// notes are variables read and deliberately not acted on, for the log.
	notes []string
}

// redisAuthPassword names the password part of REDIS_AUTH ("user:pass").
const redisAuthPassword = "REDIS_AUTH (password part)"

// envoyMode reports whether the environment is envoyproxy/ratelimit's.
func envoyMode(env func(string) (string, bool)) bool {
	for _, k := range []string{"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "REDIS_URL"} {
		if _, ok := env(k); ok {
			return true
		}
	}
	return false
}

// readEnvoyEnv reads envoyproxy/ratelimit's variables, with its defaults.
func readEnvoyEnv(env func(string) (string, bool)) (*envoyEnv, error) {
	get := func(k, def string) string {
		if v, ok := env(k); ok {
			return v
		}
		return def
	}
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	boolean := func(k string, def bool) bool {
		v, ok := env(k)
		if !ok || v == "" {
			return def
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			bad("%s=%q: want true or false", k, v)
		}
		return b
	}
	e := &envoyEnv{env: env}
	root := get("RUNTIME_ROOT", "/srv/runtime_data/current")
	e.dir = filepath.Join(root, get("RUNTIME_SUBDIRECTORY", ""), get("RUNTIME_APPDIRECTORY", "config"))
	e.dirOpts = config.DirOptions{Merge: boolean("MERGE_DOMAIN_CONFIG", false), IgnoreDotfiles: boolean("RUNTIME_IGNOREDOTFILES", false)}
	if !boolean("RUNTIME_WATCH_ROOT", true) {
		e.notes = append(e.notes, "RUNTIME_WATCH_ROOT=false: the directory and every directory above it are watched either way, so both ways of updating it are seen")
	}
	e.httpAddr = net.JoinHostPort(get("HOST", "0.0.0.0"), get("PORT", "8080"))
	e.grpcAddr = net.JoinHostPort(get("GRPC_HOST", "0.0.0.0"), get("GRPC_PORT", "8081"))
	e.debug = net.JoinHostPort(get("DEBUG_HOST", "0.0.0.0"), get("DEBUG_PORT", "6070"))
	e.logLevel = strings.ToLower(get("LOG_LEVEL", "WARN"))
	if e.logLevel == "warning" {
		e.logLevel = "warn"
	}
	if e.logLevel == "trace" {
		e.logLevel = "debug"
	}
	if e.logLevel == "fatal" || e.logLevel == "panic" {
		e.logLevel = "error"
	}
	e.logFormat = strings.ToLower(get("LOG_FORMAT", "text"))
	if e.logFormat != "text" && e.logFormat != "json" {
		bad("LOG_FORMAT=%q: want text or json", e.logFormat)
	}
	e.prefix = get("CACHE_KEY_PREFIX", "")
	e.envoy.ShadowMode = boolean("SHADOW_MODE", false)
	e.envoy.StopIncrementWhenOverLimit = boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false)
	e.envoy.ResponseDynamicMetadata = boolean("RESPONSE_DYNAMIC_METADATA", false)
	if v, ok := env("NEAR_LIMIT_RATIO"); ok && v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r <= 0 || r > 1 {
			bad("NEAR_LIMIT_RATIO=%q: want a number in (0, 1]", v)
		}
		e.envoy.NearLimitRatio = r
	}
	e.readRedis(get, boolean, bad)
	e.refuseUnsupported(get, boolean, bad)
	if len(errs) > 0 {
		return nil, fmt.Errorf("envoyproxy/ratelimit environment: %s", strings.Join(errs, "; "))
	}
	return e, nil
}

// readRedis maps REDIS_* to a valkey section.
func (e *envoyEnv) readRedis(get func(k, def string) string, boolean func(string, bool) bool, bad func(string, ...any)) {
	if t := strings.ToLower(get("REDIS_SOCKET_TYPE", "unix")); t != "tcp" {
		bad("REDIS_SOCKET_TYPE=%q: only tcp is supported (a Unix socket is not)", t)
	}
	v := &config.Valkey{Timeout: sluice.DefaultTimeout, ConnectTimeout: config.DefaultConnectTimeout}
	typ := strings.ToLower(get("REDIS_TYPE", "single"))
	urls := strings.Split(get("REDIS_URL", ""), ",")
	if typ == "sentinel" && len(urls) > 1 {
		// "master,sentinel1:port,sentinel2:port"
		v.Sentinel = &config.Sentinel{MasterSet: strings.TrimSpace(urls[0])}
		if get("REDIS_SENTINEL_AUTH", "") != "" {
			v.Sentinel.PasswordEnv = "REDIS_SENTINEL_AUTH"
		}
		urls = urls[1:]
	}
	for _, u := range urls {
		if u = strings.TrimSpace(u); u != "" {
			if _, _, err := net.SplitHostPort(u); err != nil {
				bad("REDIS_URL: %q is not host:port", u)
			}
			v.Addresses = append(v.Addresses, u)
		}
	}
	switch t := typ; t {
	case "single":
		if len(v.Addresses) != 1 {
			bad("REDIS_TYPE=single needs one address in REDIS_URL, got %d", len(v.Addresses))
		}
	case "cluster":
		if len(v.Addresses) == 0 {
			bad("REDIS_TYPE=cluster needs seed addresses in REDIS_URL")
		}
	case "sentinel":
		if v.Sentinel == nil || v.Sentinel.MasterSet == "" || len(v.Addresses) == 0 {
			bad("REDIS_TYPE=sentinel needs REDIS_URL=<master name>,<sentinel host:port>,...")
		} else {
			v.Sentinel.Addresses, v.Addresses = v.Addresses, nil
		}
	default:
		bad("REDIS_TYPE=%q: want single, cluster or sentinel", t)
	}
	if auth := get("REDIS_AUTH", ""); auth != "" {
		v.PasswordEnv = "REDIS_AUTH"
		if user, pass, ok := strings.Cut(auth, ":"); ok {
			v.Username, v.PasswordEnv = user, redisAuthPassword
			env := e.env
			e.env = func(k string) (string, bool) {
				if k == redisAuthPassword {
					return pass, true
				}
				return env(k)
			}
		}
	}
	if boolean("REDIS_TLS", false) {
		v.TLS = &config.TLS{CAFile: get("REDIS_TLS_CACERT", ""), CertFile: get("REDIS_TLS_CLIENT_CERT", ""), KeyFile: get("REDIS_TLS_CLIENT_KEY", "")}
		if (v.TLS.CertFile == "") != (v.TLS.KeyFile == "") {
			bad("REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY go together")
		}
	}
	if t := get("REDIS_TIMEOUT", ""); t != "" {
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 || d > time.Minute {
			bad("REDIS_TIMEOUT=%q: want a duration up to 1m", t)
		}
		v.Timeout = d
	}
	if _, ok := lookup(get, "REDIS_POOL_SIZE"); ok {
		e.notes = append(e.notes, "REDIS_POOL_SIZE is not used: the Valkey client pipelines over one connection per node")
	}
	e.valkey = v
}

func lookup(get func(k, def string) string, k string) (string, bool) {
	const unset = "\x00unset"
	v := get(k, unset)
	return v, v != unset
}

// refuseUnsupported refuses variables that ask for behaviour sluice does
// not have, when set to anything but their default.
func (e *envoyEnv) refuseUnsupported(get func(k, def string) string, boolean func(string, bool) bool, bad func(string, ...any)) {
	if b := strings.ToLower(get("BACKEND_TYPE", "redis")); b != "redis" {
		bad("BACKEND_TYPE=%q: only redis (Valkey) is supported", b)
	}
	if _, ok := lookup(get, "USE_STATSD"); ok && boolean("USE_STATSD", true) {
		bad("USE_STATSD=true: statsd is not supported; metrics are served in Prometheus format on /metrics (set USE_STATSD=false)")
	}
	e.envoy.QuotaMode = boolean("QUOTA_MODE", false)
	for _, k := range []string{"USE_DOG_STATSD", "REDIS_PERSECOND", "LIMIT_RESPONSE_HEADERS_ENABLED", "GRPC_SERVER_USE_TLS",
		"TRACING_ENABLED", "FORCE_START_WITHOUT_INITIAL_CONFIG", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"} {
		if boolean(k, false) {
			bad("%s=true is not supported by sluice", k)
		}
	}
	if t := strings.ToUpper(get("CONFIG_TYPE", "FILE")); t != "FILE" {
		bad("CONFIG_TYPE=%q: only FILE is supported (no xDS)", t)
	}
	if get("GRPC_UDS", "") != "" {
		bad("GRPC_UDS: a Unix socket for gRPC is not supported")
	}
	for _, k := range []string{"LOCAL_CACHE_SIZE_IN_BYTES", "EXPIRATION_JITTER_MAX_SECONDS", "REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT"} {
		if v, ok := lookup(get, k); ok {
			e.notes = append(e.notes, fmt.Sprintf("%s=%s is not used (sluice has its own local deny cache, key expiry and batching)", k, v))
		}
	}
}

// readEnvironment applies envoyproxy/ratelimit's environment when in use
// (no --config, and its variables set), and notes a --config directory.
// Flags given explicitly win over the environment. It returns an exit code,
// 0 to go on.
func (f *serveFlags) readEnvironment(env func(string) (string, bool), stderr io.Writer) int {
	if f.configPath == "" && envoyMode(env) {
		e, err := readEnvoyEnv(env)
		if err != nil {
			fmt.Fprintf(stderr, "sluice serve: %v\n", err)
			return 2
		}
		f.envoy, f.configPath = e, e.dir
		// The environment's addresses count as given: they win over the
		// defaults (flags given explicitly still win over them).
		if !f.set["listen"] {
			f.listen, f.set["listen"] = e.httpAddr, true
		}
		if !f.set["grpc-listen"] {
			f.grpcListen, f.set["grpc-listen"] = e.grpcAddr, true
		}
		if !f.set["log-level"] {
			f.logLevel = e.logLevel
		}
		if e.prefix != "" && !validPrefix(e.prefix) {
			fmt.Fprintf(stderr, "sluice serve: CACHE_KEY_PREFIX=%q: 1 to 64 characters without braces or spaces\n", e.prefix)
			return 2
		}
	}
	if f.configPath != "" {
		if st, err := os.Stat(f.configPath); err == nil && st.IsDir() {
			o := config.DirOptions{}
			if f.envoy != nil {
				o = f.envoy.dirOpts
			} else {
				e, err := readEnvoyDirOptions(env)
				if err != nil {
					fmt.Fprintf(stderr, "sluice serve: %v\n", err)
					return 2
				}
				o = e
			}
			f.dirOpts = &o
		}
	}
	return 0
}

// readEnvoyDirOptions reads MERGE_DOMAIN_CONFIG and RUNTIME_IGNOREDOTFILES
// for a --config directory.
func readEnvoyDirOptions(env func(string) (string, bool)) (config.DirOptions, error) {
	var o config.DirOptions
	for k, dst := range map[string]*bool{"MERGE_DOMAIN_CONFIG": &o.Merge, "RUNTIME_IGNOREDOTFILES": &o.IgnoreDotfiles} {
		if v, ok := env(k); ok && v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return o, fmt.Errorf("%s=%q: want true or false", k, v)
			}
			*dst = b
		}
	}
	return o, nil
}

func validPrefix(p string) bool {
	return p != "" && len(p) <= 64 && !strings.ContainsAny(p, "{} \t\r\n")
}

// adjust completes a configuration read from the directory: the valkey
// section and the prefix come from the environment.
func (e *envoyEnv) adjust(c *config.Config) {
	if c.Valkey == nil {
		v := *e.valkey
		c.Valkey = &v
	}
	if e.prefix != "" {
		c.Prefix = e.prefix
	}
}

// newLogger makes the logger: JSON, or text under LOG_FORMAT=text.
func (f *serveFlags) newLogger(stderr io.Writer) (*slog.Logger, int) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		fmt.Fprintf(stderr, "sluice serve: --log-level: %v\n", err)
		return nil, 2
	}
	o := &slog.HandlerOptions{Level: level}
	if f.envoy != nil && f.envoy.logFormat == "text" {
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
		opts.Env = e.env
		opts.Envoy.ShadowMode = e.envoy.ShadowMode
		opts.Envoy.StopIncrementWhenOverLimit = e.envoy.StopIncrementWhenOverLimit
		opts.Envoy.ResponseDynamicMetadata = e.envoy.ResponseDynamicMetadata
		opts.Envoy.NearLimitRatio = e.envoy.NearLimitRatio
		opts.Envoy.QuotaMode = e.envoy.QuotaMode
		opts.Adjust = e.adjust
		for _, n := range e.notes {
			logger.Warn("envoyproxy/ratelimit environment: " + n)
		}
		logger.Info("reading envoyproxy/ratelimit's environment", "config_dir", e.dir, "merge_domain_config", e.dirOpts.Merge)
	}
	if f.set["valkey"] {
		opts.ValkeyAddresses = cfg.Valkey.Addresses
	}
	return opts
}
