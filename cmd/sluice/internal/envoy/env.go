package envoy

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
)

// envoyproxy/ratelimit's environment: when sluice serve is given no
// --config and RUNTIME_ROOT, RUNTIME_SUBDIRECTORY or REDIS_URL is set, it
// reads the variables below as envoyproxy/ratelimit does, so that its
// deployment runs unchanged (docs/migrating-from-envoy-ratelimit.md has the
// table). A variable that asks for what sluice cannot do is refused, never
// ignored silently. sluice serve applies what ReadEnv reads.

// Env is what the environment says.
type Env struct {
	// Dir is the configuration directory (RUNTIME_ROOT and below), read
	// with DirOptions.
	Dir        string
	DirOptions config.DirOptions
	// Valkey is the valkey section REDIS_* make.
	Valkey *config.Valkey
	// PerSecond is the per-second Valkey REDIS_PERSECOND_* make
	// (persecond.go), nil unless REDIS_PERSECOND=true.
	PerSecond *config.Valkey
	// GRPCTLS is the gRPC server's TLS (tls.go), nil unless
	// GRPC_SERVER_USE_TLS=true.
	GRPCTLS *GRPCTLS
	// XDS is the management server the configuration comes from under
	// CONFIG_TYPE=GRPC_XDS_SOTW (xds.go), nil under FILE: Dir is then not
	// read.
	XDS *XDS
	// LookupEnv answers the synthetic variable holding REDIS_AUTH's
	// password, and the others from the environment.
	LookupEnv                     func(string) (string, bool)
	HTTPAddr, GRPCAddr, DebugAddr string
	LogLevel, LogFormat           string
	Prefix                        string
	Options                       Options
	// Notes are variables read and deliberately not acted on, for the log.
	Notes []string
	// HealthCheckActiveConnection: /healthcheck and the gRPC health
	// service answer not serving while the store does not answer
	// (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION).
	HealthCheckActiveConnection bool
	// StartupMaxElapsed bounds the wait for the first connection to the
	// store before the ports open (REDIS_STARTUP_MAX_ELAPSED_TIME; 0: no
	// bound).
	StartupMaxElapsed time.Duration
}

// redisAuthPassword names the password part of REDIS_AUTH ("user:pass").
const redisAuthPassword = "REDIS_AUTH (password part)"

// InEnv reports whether the environment is envoyproxy/ratelimit's.
func InEnv(env func(string) (string, bool)) bool {
	for _, k := range []string{"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "REDIS_URL"} {
		if _, ok := env(k); ok {
			return true
		}
	}
	return false
}

// ReadEnv reads envoyproxy/ratelimit's variables, with its defaults.
func ReadEnv(env func(string) (string, bool)) (*Env, error) {
	get := func(k, def string) string {
		if v, ok := env(k); ok {
			return v
		}
		return def
	}
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	boolean := envBoolean(env, bad)
	e := &Env{LookupEnv: env}
	root := get("RUNTIME_ROOT", "/srv/runtime_data/current")
	e.Dir = filepath.Join(root, get("RUNTIME_SUBDIRECTORY", ""), get("RUNTIME_APPDIRECTORY", "config"))
	e.DirOptions = config.DirOptions{Merge: boolean("MERGE_DOMAIN_CONFIG", false), IgnoreDotfiles: boolean("RUNTIME_IGNOREDOTFILES", false)}
	if !boolean("RUNTIME_WATCH_ROOT", true) {
		e.Notes = append(e.Notes, "RUNTIME_WATCH_ROOT=false: the directory and every directory above it are watched either way, so both ways of updating it are seen")
	}
	e.readServing(get, bad)
	e.Prefix = get("CACHE_KEY_PREFIX", "")
	e.readOptions(env, boolean, bad)
	e.readRedis(get, boolean, bad)
	e.readPerSecond(get, boolean, bad)
	e.readGRPCTLS(get, boolean, bad)
	e.readConfigType(get, boolean, bad)
	e.refuseUnsupported(get, boolean, bad)
	e.readUpstreamRest(env, boolean, bad)
	if len(errs) > 0 {
		return nil, fmt.Errorf("envoyproxy/ratelimit environment: %s", strings.Join(errs, "; "))
	}
	return e, nil
}

// envBoolean returns the reader of boolean variables: a variable unset or
// empty is def; one that is not true or false is reported to bad.
func envBoolean(env func(string) (string, bool), bad func(string, ...any)) func(k string, def bool) bool {
	return func(k string, def bool) bool {
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
}

// readServing reads the addresses to serve on and the log's level and
// format.
func (e *Env) readServing(get func(k, def string) string, bad func(string, ...any)) {
	e.HTTPAddr = net.JoinHostPort(get("HOST", "0.0.0.0"), get("PORT", "8080"))
	e.GRPCAddr = net.JoinHostPort(get("GRPC_HOST", "0.0.0.0"), get("GRPC_PORT", "8081"))
	e.DebugAddr = net.JoinHostPort(get("DEBUG_HOST", "0.0.0.0"), get("DEBUG_PORT", "6070"))
	e.LogLevel = logLevel(get("LOG_LEVEL", "WARN"))
	e.LogFormat = strings.ToLower(get("LOG_FORMAT", "text"))
	if e.LogFormat != "text" && e.LogFormat != "json" {
		bad("LOG_FORMAT=%q: want text or json", e.LogFormat)
	}
}

// readOptions reads the variables that change how requests are decided
// and answered.
func (e *Env) readOptions(env func(string) (string, bool), boolean func(string, bool) bool, bad func(string, ...any)) {
	e.Options.ShadowMode = boolean("SHADOW_MODE", false)
	e.Options.StopIncrementWhenOverLimit = boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false)
	e.Options.ResponseDynamicMetadata = boolean("RESPONSE_DYNAMIC_METADATA", false)
	if v, ok := env("NEAR_LIMIT_RATIO"); ok && v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r <= 0 || r > 1 {
			bad("NEAR_LIMIT_RATIO=%q: want a number in (0, 1]", v)
		}
		e.Options.NearLimitRatio = r
	}
}

// readRedis maps REDIS_* to a valkey section.
func (e *Env) readRedis(get func(k, def string) string, boolean func(string, bool) bool, bad func(string, ...any)) {
	if t := strings.ToLower(get("REDIS_SOCKET_TYPE", "unix")); t != "tcp" {
		bad("REDIS_SOCKET_TYPE=%q: only tcp is supported (a Unix socket is not)", t)
	}
	v := &config.Valkey{Timeout: sluice.DefaultTimeout, ConnectTimeout: config.DefaultConnectTimeout}
	redisAddresses(v, get, bad)
	if auth := get("REDIS_AUTH", ""); auth != "" {
		e.redisAuth(v, auth)
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
	e.Valkey = v
}

// redisAuth sets the credentials of v from REDIS_AUTH, auth: a password,
// or user:password, whose password e.LookupEnv then serves as
// redisAuthPassword.
func (e *Env) redisAuth(v *config.Valkey, auth string) {
	v.PasswordEnv = "REDIS_AUTH"
	if user, pass, ok := strings.Cut(auth, ":"); ok {
		v.Username, v.PasswordEnv = user, redisAuthPassword
		env := e.LookupEnv
		e.LookupEnv = func(k string) (string, bool) {
			if k == redisAuthPassword {
				return pass, true
			}
			return env(k)
		}
	}
}

// redisAddresses sets the addresses of v, or its Sentinels, from
// REDIS_TYPE and REDIS_URL.
func redisAddresses(v *config.Valkey, get func(k, def string) string, bad func(string, ...any)) {
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
	v.Addresses = append(v.Addresses, hostPorts(urls, bad)...)
	redisType(v, typ, bad)
}

// hostPorts returns the addresses of REDIS_URL, without spaces or empty
// ones, reporting those that are not host:port.
func hostPorts(urls []string, bad func(string, ...any)) []string {
	var out []string
	for _, u := range urls {
		if u = strings.TrimSpace(u); u != "" {
			if _, _, err := net.SplitHostPort(u); err != nil {
				bad("REDIS_URL: %q is not host:port", u)
			}
			out = append(out, u)
		}
	}
	return out
}

// redisType checks that v's addresses fit REDIS_TYPE typ and, for
// sentinel, makes them its Sentinels'.
func redisType(v *config.Valkey, typ string, bad func(string, ...any)) {
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
}

// logLevel is LOG_LEVEL (logrus's levels) as slog's: warning is warn,
// trace debug, fatal and panic error.
func logLevel(v string) string {
	switch l := strings.ToLower(v); l {
	case "warning":
		return "warn"
	case "trace":
		return "debug"
	case "fatal", "panic":
		return "error"
	default:
		return l
	}
}

func lookup(get func(k, def string) string, k string) (string, bool) {
	const unset = "\x00unset"
	v := get(k, unset)
	return v, v != unset
}

// refuseUnsupported refuses variables that ask for behaviour sluice does
// not have, when set to anything but their default.
func (e *Env) refuseUnsupported(get func(k, def string) string, boolean func(string, bool) bool, bad func(string, ...any)) {
	if b := strings.ToLower(get("BACKEND_TYPE", "redis")); b != "redis" {
		bad("BACKEND_TYPE=%q: only redis (Valkey) is supported", b)
	}
	if _, ok := lookup(get, "USE_STATSD"); ok && boolean("USE_STATSD", true) {
		bad("USE_STATSD=true: statsd is not supported; metrics are served in Prometheus format on /metrics (set USE_STATSD=false)")
	}
	e.Options.QuotaMode = boolean("QUOTA_MODE", false)
	for _, k := range []string{"USE_DOG_STATSD", "LIMIT_RESPONSE_HEADERS_ENABLED",
		"TRACING_ENABLED", "FORCE_START_WITHOUT_INITIAL_CONFIG", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"} {
		if boolean(k, false) {
			bad("%s=true is not supported by sluice", k)
		}
	}
	if get("GRPC_UDS", "") != "" {
		bad("GRPC_UDS: a Unix socket for gRPC is not supported")
	}
}

// ReadDirOptions reads MERGE_DOMAIN_CONFIG and RUNTIME_IGNOREDOTFILES
// for a --config directory.
func ReadDirOptions(env func(string) (string, bool)) (config.DirOptions, error) {
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

// ValidPrefix reports whether p may be CACHE_KEY_PREFIX: 1 to 64
// characters without braces or spaces.
func ValidPrefix(p string) bool {
	return p != "" && len(p) <= 64 && !strings.ContainsAny(p, "{} \t\r\n")
}

// Adjust completes a configuration read from the directory: the valkey
// section and the prefix come from the environment.
func (e *Env) Adjust(c *config.Config) {
	// Per-second limits first: they take REDIS_PERSECOND_TIMEOUT.
	e.adjustTimeouts(c)
	if c.Valkey == nil {
		v := *e.Valkey
		c.Valkey = &v
		// The directory was read without a valkey section: its policies'
		// decisions take REDIS_TIMEOUT (a policy's own timeout stays).
		ps := make([]*config.Policy, len(c.Policies))
		for i, p := range c.Policies {
			if p.Timeout == 0 {
				cp := *p
				cp.Timeout = v.Timeout
				p = &cp
			}
			ps[i] = p
		}
		c.Policies = ps
	}
	if e.Prefix != "" {
		c.Prefix = e.Prefix
	}
}
