package config

import (
	"time"

	"go.yaml.in/yaml/v3"
)

// Decoding of waiting instead of refusing: a policy's wait, and the
// service-wide bounds on the requests waiting at once (max_waiting,
// max_waiting_per_key).

// The default bounds on waiting requests, httplimit's.
const (
	DefaultMaxWaiting       = 1000
	DefaultMaxWaitingPerKey = 10
)

// waitOption decodes p's wait, refusing it where retries would count
// (count_rejected) and where nothing is refused (shadow). It runs on the validated policy (policyExtras).
func (d *decoder) waitOption(f map[string]field, p *Policy) {
	x, ok := f["wait"]
	if !ok {
		return
	}
	p.Wait = d.durationField(x.val, "wait", policySection.Field("wait"))
	if p.Params.CountRejected {
		d.errorf(x.key, "policy %q: wait cannot apply with count_rejected (every retry while waiting would count as a refusal)", p.Name)
	}
	if p.Shadow {
		d.errorf(x.key, "policy %q: wait cannot apply with shadow: true (a shadow policy never refuses, so nothing waits)", p.Name)
	}
}

// waitBoundDecoders decode the top-level bounds on waiting requests.
var waitBoundDecoders = []fieldDecoder[*Config]{
	{"max_waiting", func(d *decoder, c *Config, n *yaml.Node) {
		v, _ := d.intField(n, "max_waiting", topSection.Field("max_waiting"))
		c.MaxWaiting = int(v)
	}},
	{"max_waiting_per_key", func(d *decoder, c *Config, n *yaml.Node) {
		v, _ := d.intField(n, "max_waiting_per_key", topSection.Field("max_waiting_per_key"))
		c.MaxWaitingPerKey = int(v)
	}},
}

// waitBounds decodes max_waiting and max_waiting_per_key into c (their
// defaults when absent), refusing them when no policy of c waits: they
// would bound nothing.
func (d *decoder) waitBounds(f map[string]field, c *Config) {
	c.MaxWaiting, c.MaxWaitingPerKey = DefaultMaxWaiting, DefaultMaxWaitingPerKey
	decodeFields(d, f, c, waitBoundDecoders)
	for _, p := range c.Policies {
		if p.Wait > 0 {
			return
		}
	}
	for _, name := range []string{"max_waiting", "max_waiting_per_key"} {
		if x, ok := f[name]; ok {
			d.errorf(x.key, "%s bounds the requests waiting for admission, but no policy sets wait", name)
		}
	}
}

// MaxWait is the longest wait a policy takes: a proxy's subrequest (nginx
// auth_request's proxy_read_timeout is 60s by default) gives up after
// about as long.
const MaxWait = time.Minute

// MaxWaitingBound bounds max_waiting and max_waiting_per_key.
const MaxWaitingBound = 1_000_000
