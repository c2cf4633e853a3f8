package envoy

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Every variable of envoyproxy/ratelimit's settings (its src/settings
// Settings struct), and what sluice serve does with it. TestVariablesClassified
// fails when upstream's list has a variable this table does not classify,
// and checks each class's behaviour; docs/migrating-from-envoy-ratelimit.md
// lists them.

// Class is what sluice serve does with one of upstream's variables.
type Class int

const (
	// Honoured: read and acted on as upstream does.
	Honoured Class = iota
	// Refused: a value other than upstream's default stops the start,
	// naming the variable.
	Refused
	// Noted: read, not acted on, logged at start when set; the difference
	// and what restores upstream's behaviour are in the migration guide.
	Noted
	// Dependent: read by upstream only when a switch that sluice refuses is
	// on (its Variable.Needs); unused either way, as upstream leaves it
	// unused without that switch.
	Dependent
)

// Variable is one of upstream's variables.
type Variable struct {
	Class Class
	// Needs is the switch a Dependent variable is read under.
	Needs string
	// Sample is a value other than the default, for the tests, set
	// with the variables With (name, value, ...) it needs.
	Sample string
	With   []string
}

func h(sample string) Variable { return Variable{Class: Honoured, Sample: sample} }
func hw(sample string, with ...string) Variable {
	return Variable{Class: Honoured, Sample: sample, With: with}
}
func refused(sample string, with ...string) Variable {
	return Variable{Class: Refused, Sample: sample, With: with}
}
func noted(sample string) Variable { return Variable{Class: Noted, Sample: sample} }
func dependent(needs, sample string) Variable {
	return Variable{Class: Dependent, Needs: needs, Sample: sample}
}

// Variables classifies every variable of upstream's settings.
var Variables = map[string]Variable{
	"HOST": h("127.0.0.1"), "PORT": h("9000"), "DEBUG_HOST": h("127.0.0.1"), "DEBUG_PORT": h("9002"),
	"GRPC_HOST": h("127.0.0.1"), "GRPC_PORT": h("9001"), "GRPC_UDS": refused("/tmp/rl.sock"),
	"GRPC_MAX_CONNECTION_AGE": h("1h"), "GRPC_MAX_CONNECTION_AGE_GRACE": h("1m"),
	"GRPC_SERVER_USE_TLS":    hw("true", "GRPC_SERVER_TLS_CERT", "/c.pem", "GRPC_SERVER_TLS_KEY", "/k.pem"),
	"GRPC_SERVER_TLS_CERT":   h("/c.pem"),
	"GRPC_SERVER_TLS_KEY":    h("/k.pem"),
	"GRPC_CLIENT_TLS_CACERT": h("/ca.pem"),
	"GRPC_CLIENT_TLS_SAN":    h("client"),
	"LOG_LEVEL":              h("debug"), "LOG_FORMAT": h("json"),
	"CONFIG_TYPE":                                   h("GRPC_XDS_SOTW"),
	"FORCE_START_WITHOUT_INITIAL_CONFIG":            refused("true"),
	"CONFIG_GRPC_XDS_NODE_ID":                       h("node"),
	"CONFIG_GRPC_XDS_NODE_METADATA":                 h("a:b"),
	"CONFIG_GRPC_XDS_SERVER_URL":                    h("xds:18000"),
	"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": h("1s"),
	"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS":     h("a:b"),
	"CONFIG_GRPC_XDS_SERVER_USE_TLS":                h("true"),
	"CONFIG_GRPC_XDS_CLIENT_TLS_CERT":               h("/c.pem"),
	"CONFIG_GRPC_XDS_CLIENT_TLS_KEY":                h("/k.pem"),
	"CONFIG_GRPC_XDS_SERVER_TLS_CACERT":             h("/ca.pem"),
	"CONFIG_GRPC_XDS_SERVER_TLS_SAN":                h("xds"),
	"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL":           h("1s"),
	"XDS_CLIENT_BACKOFF_MAX_INTERVAL":               h("2s"),
	"XDS_CLIENT_BACKOFF_RANDOM_FACTOR":              h("0.1"),
	"XDS_CLIENT_BACKOFF_JITTER":                     h("false"),
	"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES":              h("1000"),
	"USE_DOG_STATSD":                                refused("true"),
	"USE_DOG_STATSD_MOGRIFIERS":                     dependent("USE_DOG_STATSD", "X"),
	"USE_STATSD":                                    refused("true"),
	"STATSD_HOST":                                   dependent("USE_STATSD", "statsd"),
	"STATSD_PORT":                                   dependent("USE_STATSD", "9125"),
	"EXTRA_TAGS":                                    h("env:prod"),
	"STATS_FLUSH_INTERVAL":                          noted("1s"),
	"DISABLE_STATS":                                 noted("true"),
	"USE_PROMETHEUS":                                noted("true"),
	"PROMETHEUS_ADDR":                               noted(":9091"),
	"PROMETHEUS_PATH":                               noted("/m"),
	"PROMETHEUS_MAPPER_YAML":                        refused("/mapper.yaml"),
	"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS":      refused("true"),
	"RUNTIME_ROOT":                                  h("/rt"), "RUNTIME_SUBDIRECTORY": h("ratelimit"), "RUNTIME_APPDIRECTORY": h("conf"),
	"RUNTIME_IGNOREDOTFILES": h("true"), "RUNTIME_WATCH_ROOT": h("false"),
	"EXPIRATION_JITTER_MAX_SECONDS":           noted("10"),
	"LOCAL_CACHE_SIZE_IN_BYTES":               h("1000"),
	"NEAR_LIMIT_RATIO":                        h("0.5"),
	"CACHE_KEY_PREFIX":                        h("p:"),
	"BACKEND_TYPE":                            refused("memcache"),
	"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": h("true"),
	"LIMIT_RESPONSE_HEADERS_ENABLED":          refused("true"),
	"LIMIT_LIMIT_HEADER":                      dependent("LIMIT_RESPONSE_HEADERS_ENABLED", "X-L"),
	"LIMIT_REMAINING_HEADER":                  dependent("LIMIT_RESPONSE_HEADERS_ENABLED", "X-R"),
	"LIMIT_RESET_HEADER":                      dependent("LIMIT_RESPONSE_HEADERS_ENABLED", "X-T"),
	"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": h("true"),
	"REDIS_SOCKET_TYPE":                       h("tcp"), "REDIS_TYPE": h("single"), "REDIS_URL": h("r:6379"),
	"REDIS_POOL_SIZE": noted("5"), "REDIS_AUTH": h("pw"), "REDIS_TLS": h("true"),
	"REDIS_TLS_CLIENT_CERT": h("/c.pem"), "REDIS_TLS_CLIENT_KEY": h("/k.pem"), "REDIS_TLS_CACERT": h("/ca.pem"),
	"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION":         refused("true"),
	"REDIS_PIPELINE_WINDOW":                        noted("150us"),
	"REDIS_PIPELINE_LIMIT":                         noted("8"),
	"REDIS_CLUSTER_PIPELINE_PARALLELISM":           noted("4"),
	"REDIS_PERSECOND":                              hw("true", "REDIS_PERSECOND_SOCKET_TYPE", "tcp", "REDIS_PERSECOND_URL", "r2:6379"),
	"REDIS_PERSECOND_SOCKET_TYPE":                  h("tcp"),
	"REDIS_PERSECOND_TYPE":                         h("cluster"),
	"REDIS_PERSECOND_URL":                          h("r2:6379"),
	"REDIS_PERSECOND_POOL_SIZE":                    noted("5"),
	"REDIS_PERSECOND_AUTH":                         h("pw"),
	"REDIS_PERSECOND_TLS":                          h("true"),
	"REDIS_SENTINEL_AUTH":                          h("spw"),
	"REDIS_PERSECOND_SENTINEL_AUTH":                h("spw"),
	"REDIS_PERSECOND_PIPELINE_WINDOW":              noted("150us"),
	"REDIS_PERSECOND_PIPELINE_LIMIT":               noted("8"),
	"REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM": noted("4"),
	"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION":         h("true"),
	"REDIS_TIMEOUT":                                h("1s"),
	"REDIS_PERSECOND_TIMEOUT":                      h("1s"),
	"REDIS_POOL_ON_EMPTY_BEHAVIOR":                 refused("ERROR"),
	"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR":       refused("ERROR", "REDIS_PERSECOND", "true", "REDIS_PERSECOND_SOCKET_TYPE", "tcp", "REDIS_PERSECOND_URL", "r2:6379"),
	"REDIS_STARTUP_INITIAL_INTERVAL":               noted("2s"),
	"REDIS_STARTUP_MAX_INTERVAL":                   noted("10s"),
	"REDIS_STARTUP_MAX_ELAPSED_TIME":               h("1m"),
	"MEMCACHE_HOST_PORT":                           dependent("BACKEND_TYPE", "m:11211"),
	"MEMCACHE_MAX_IDLE_CONNS":                      dependent("BACKEND_TYPE", "5"),
	"MEMCACHE_SRV":                                 dependent("BACKEND_TYPE", "_m._tcp"),
	"MEMCACHE_SRV_REFRESH":                         dependent("BACKEND_TYPE", "1m"),
	"MEMCACHE_TLS":                                 dependent("BACKEND_TYPE", "true"),
	"MEMCACHE_TLS_CLIENT_CERT":                     dependent("BACKEND_TYPE", "/c.pem"),
	"MEMCACHE_TLS_CLIENT_KEY":                      dependent("BACKEND_TYPE", "/k.pem"),
	"MEMCACHE_TLS_CACERT":                          dependent("BACKEND_TYPE", "/ca.pem"),
	"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION":      dependent("BACKEND_TYPE", "true"),
	"SHADOW_MODE":                                  h("true"), "QUOTA_MODE": h("true"), "RESPONSE_DYNAMIC_METADATA": h("true"),
	"MERGE_DOMAIN_CONFIG":         h("true"),
	"TRACING_ENABLED":             refused("true"),
	"TRACING_SERVICE_NAME":        dependent("TRACING_ENABLED", "rl"),
	"TRACING_SERVICE_NAMESPACE":   dependent("TRACING_ENABLED", "ns"),
	"TRACING_SERVICE_INSTANCE_ID": dependent("TRACING_ENABLED", "i"),
	"TRACING_EXPORTER_PROTOCOL":   dependent("TRACING_ENABLED", "grpc"),
	"TRACING_SAMPLING_RATE":       dependent("TRACING_ENABLED", "0.5"),
}

// notedReasons say, for the Noted variables, what sluice does instead; the
// start's log repeats it.
var notedReasons = map[string]string{
	"STATS_FLUSH_INTERVAL":               "metrics are read when scraped (Prometheus), not flushed",
	"DISABLE_STATS":                      "metrics are always kept (on /metrics)",
	"USE_PROMETHEUS":                     "metrics are on /metrics of PORT and DEBUG_PORT, not on PROMETHEUS_ADDR",
	"PROMETHEUS_ADDR":                    "metrics are on /metrics of PORT and DEBUG_PORT",
	"PROMETHEUS_PATH":                    "metrics are on /metrics of PORT and DEBUG_PORT",
	"REDIS_POOL_SIZE":                    "the Valkey client pipelines over one connection per node",
	"REDIS_PIPELINE_WINDOW":              "calls are batched by the Valkey client",
	"REDIS_PIPELINE_LIMIT":               "calls are batched by the Valkey client",
	"REDIS_CLUSTER_PIPELINE_PARALLELISM": "a call's keys are decided in one script call per node",
	"EXPIRATION_JITTER_MAX_SECONDS":      "keys expire with their window",
	"REDIS_STARTUP_INITIAL_INTERVAL":     "the first connection is retried from 100ms to 5s apart",
	"REDIS_STARTUP_MAX_INTERVAL":         "the first connection is retried from 100ms to 5s apart",
}

// extraTags reads EXTRA_TAGS ("k:v,k2:v2"), labels of every
// ratelimit_* metric.
func extraTags(v string, bad func(string, ...any)) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(v, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, val, ok := strings.Cut(kv, ":")
		switch {
		case !ok:
			bad("EXTRA_TAGS: %q is not key:value", kv)
		case !labelName.MatchString(k) || strings.HasPrefix(k, "__"):
			bad("EXTRA_TAGS: %q is not a metric label name", k)
		case reservedLabels[k]:
			bad("EXTRA_TAGS: %q is a label of the metrics already", k)
		default:
			out[k] = val
		}
	}
	return out
}

var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

var reservedLabels = map[string]bool{"domain": true, "key1": true, "key2": true, "err_type": true, "grpc_method": true, "code": true, "le": true}

// readUpstreamRest reads the variables of Variables not read elsewhere:
// the refused ones, the noted ones, and REDIS_HEALTH_CHECK_ACTIVE_CONNECTION,
// REDIS_STARTUP_MAX_ELAPSED_TIME, GRPC_MAX_CONNECTION_AGE(_GRACE),
// EXTRA_TAGS, LOCAL_CACHE_SIZE_IN_BYTES and
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED.
func (e *Env) readUpstreamRest(env func(string) (string, bool), boolean func(string, bool) bool, bad func(string, ...any)) {
	set := func(k string) (string, bool) {
		v, ok := env(k)
		return v, ok && v != ""
	}
	duration := func(k string, def time.Duration) time.Duration {
		v, ok := set(k)
		if !ok {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			bad("%s=%q: want a duration", k, v)
		}
		return d
	}
	e.HealthCheckActiveConnection = boolean("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false)
	e.StartupMaxElapsed = duration("REDIS_STARTUP_MAX_ELAPSED_TIME", 0)
	e.Options.MaxConnectionAge = duration("GRPC_MAX_CONNECTION_AGE", 24*time.Hour)
	e.Options.MaxConnectionAgeGrace = duration("GRPC_MAX_CONNECTION_AGE_GRACE", time.Hour)
	boolean("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false) // either way: a configuration is loaded before the ports open
	if v, ok := set("EXTRA_TAGS"); ok {
		e.Options.ExtraLabels = extraTags(v, bad)
	}
	if v, ok := set("LOCAL_CACHE_SIZE_IN_BYTES"); ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			bad("LOCAL_CACHE_SIZE_IN_BYTES=%q: want a size in bytes", v)
		}
		e.Options.LocalCacheBytes = n
	}
	if v, ok := set("REDIS_POOL_ON_EMPTY_BEHAVIOR"); ok && !strings.EqualFold(v, "WAIT") {
		bad("REDIS_POOL_ON_EMPTY_BEHAVIOR=%q: only WAIT (calls queue on the connection; a decision ends by REDIS_TIMEOUT)", v)
	}
	if v, ok := set("PROMETHEUS_MAPPER_YAML"); ok {
		bad("PROMETHEUS_MAPPER_YAML=%q: a custom mapping is not supported; the metrics have the names of upstream's default mapping", v)
	}
	if boolean("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", false) {
		bad("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS=true is not supported: ratelimit_service_response_time_seconds is in seconds")
	}
	var names []string
	for k := range notedReasons {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if v, ok := env(k); ok {
			e.Notes = append(e.Notes, fmt.Sprintf("%s=%s is not used: %s", k, v, notedReasons[k]))
		}
	}
}
