package envoy

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/driver"
)

// REDIS_PERSECOND=true: envoyproxy/ratelimit keeps the counters of limits
// of unit SECOND on a second Redis, REDIS_PERSECOND_URL, and every other
// counter on REDIS_URL. Sluice does the same with a second Valkey: the
// policies PerSecondPolicy selects decide on it. Its variables are
// REDIS_*'s with REDIS_PERSECOND_ in front (REDIS_PERSECOND_TYPE, _URL,
// _AUTH, _SENTINEL_AUTH, _TLS, _TIMEOUT, _SOCKET_TYPE); its TLS files are
// REDIS_TLS_CACERT, REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY, shared
// with REDIS_URL's, as upstream has them.

// perSecondPrefix is the prefix of the per-second Valkey's variables.
const perSecondPrefix = "REDIS_PERSECOND_"

// perSecondName is the per-second variable of REDIS_* variable k.
func perSecondName(k string) string {
	if rest, ok := strings.CutPrefix(k, "REDIS_"); ok {
		return perSecondPrefix + rest
	}
	return k
}

// perSecondUnused are per-second variables of connection pools and
// pipelining that sluice's Valkey client has no use for.
var perSecondUnused = []string{"REDIS_PERSECOND_POOL_SIZE", "REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PERSECOND_PIPELINE_LIMIT",
	"REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM"}

// perSecondConnection are the variables that say how to reach the
// per-second Valkey, unused unless REDIS_PERSECOND is true.
var perSecondConnection = []string{"REDIS_PERSECOND_URL", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_TLS",
	"REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_TIMEOUT", "REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR"}

// readPerSecond reads REDIS_PERSECOND and, when it is true, the
// per-second Valkey's variables into e.PerSecond.
func (e *Env) readPerSecond(get func(k, def string) string, boolean func(string, bool) bool, bad func(string, ...any)) {
	if !boolean("REDIS_PERSECOND", false) {
		for _, k := range append(perSecondConnection, perSecondUnused...) {
			if v, ok := lookup(get, k); ok {
				e.Notes = append(e.Notes, k+"="+v+" is not used: REDIS_PERSECOND is not true (as upstream)")
			}
		}
		return
	}
	psGet := func(k, def string) string { return get(perSecondName(k), def) }
	psBad := func(format string, args ...any) {
		bad("%s", strings.ReplaceAll(fmt.Sprintf(format, args...), "REDIS_", perSecondPrefix))
	}
	if t := strings.ToLower(psGet("REDIS_SOCKET_TYPE", "unix")); t != "tcp" {
		psBad("REDIS_SOCKET_TYPE=%q: only tcp is supported (a Unix socket is not)", t)
	}
	if _, ok := lookup(get, "REDIS_PERSECOND_URL"); !ok {
		bad("REDIS_PERSECOND=true needs REDIS_PERSECOND_URL (upstream's default is a Unix socket, which is not supported)")
	}
	v := &config.Valkey{Timeout: sluice.DefaultTimeout, ConnectTimeout: config.DefaultConnectTimeout}
	redisAddresses(v, psGet, psBad)
	if v.Sentinel != nil && v.Sentinel.PasswordEnv != "" {
		v.Sentinel.PasswordEnv = perSecondName(v.Sentinel.PasswordEnv)
	}
	if auth := get("REDIS_PERSECOND_AUTH", ""); auth != "" {
		e.namedAuth(v, "REDIS_PERSECOND_AUTH", auth)
	}
	if boolean("REDIS_PERSECOND_TLS", false) {
		v.TLS = &config.TLS{CAFile: get("REDIS_TLS_CACERT", ""), CertFile: get("REDIS_TLS_CLIENT_CERT", ""), KeyFile: get("REDIS_TLS_CLIENT_KEY", "")}
		if (v.TLS.CertFile == "") != (v.TLS.KeyFile == "") {
			bad("REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY go together")
		}
	}
	if t := get("REDIS_PERSECOND_TIMEOUT", ""); t != "" {
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 || d > time.Minute {
			bad("REDIS_PERSECOND_TIMEOUT=%q: want a duration up to 1m", t)
		}
		v.Timeout = d
	}
	if v := get("REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", ""); v != "" && !strings.EqualFold(v, "WAIT") {
		bad("REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR=%q: only WAIT (calls queue on the connection; a decision ends by REDIS_PERSECOND_TIMEOUT)", v)
	}
	for _, k := range perSecondUnused {
		if v, ok := lookup(get, k); ok {
			e.Notes = append(e.Notes, k+"="+v+" is not used: the Valkey client pipelines over one connection per node")
		}
	}
	e.PerSecond = v
}

// namedAuth sets the credentials of v from variable k, auth: a password,
// or user:password, whose password e.LookupEnv then serves under the name
// "k (password part)".
func (e *Env) namedAuth(v *config.Valkey, k, auth string) {
	v.PasswordEnv = k
	if user, pass, ok := strings.Cut(auth, ":"); ok {
		name := k + " (password part)"
		v.Username, v.PasswordEnv = user, name
		env := e.LookupEnv
		e.LookupEnv = func(key string) (string, bool) {
			if key == name {
				return pass, true
			}
			return env(key)
		}
	}
}

// PerSecondPolicy reports whether the counters of p live on the
// per-second Valkey under REDIS_PERSECOND=true: p is an
// envoyproxy/ratelimit limit (configured, or a per-request override) of a
// one-second window, upstream's unit SECOND. (A unit_multiplier, which
// upstream does not have, makes a longer window: its counters stay on
// REDIS_URL, shared with the limits and overrides of the same window.)
func PerSecondPolicy(p *config.Policy) bool {
	return p.Envoy && p.Algorithm == driver.AlgorithmFixedWindow && p.Params.Window == time.Second && p.Params.Calendar.IsZero()
}

// adjustTimeouts gives the envoyproxy/ratelimit limits of c without a
// timeout of their own the decision timeout of the Valkey they decide on:
// REDIS_PERSECOND_TIMEOUT for the per-second ones, REDIS_TIMEOUT for the
// others. The policies changed are copies: c's slice is replaced, and
// whatever else shares the old policies is untouched.
func (e *Env) adjustTimeouts(c *config.Config) {
	if e.Valkey == nil {
		return
	}
	out := make([]*config.Policy, len(c.Policies))
	for i, p := range c.Policies {
		out[i] = p
		if !p.Envoy || p.Timeout != 0 {
			continue
		}
		cp := *p
		cp.Timeout = e.Valkey.Timeout
		if e.PerSecond != nil && PerSecondPolicy(p) {
			cp.Timeout = e.PerSecond.Timeout
		}
		out[i] = &cp
	}
	c.Policies = out
}
