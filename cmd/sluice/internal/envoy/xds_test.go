package envoy

import (
	"strings"
	"testing"
	"time"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestXDSEnv: CONFIG_TYPE=GRPC_XDS_SOTW reads the management server's
// variables with upstream's defaults; a bad value is refused by name, an
// unknown CONFIG_TYPE too, and the variables under FILE are said unused.
func TestXDSEnv(t *testing.T) {
	e, err := ReadEnv(mapEnv(envWith("CONFIG_TYPE", "GRPC_XDS_SOTW")))
	if err != nil {
		t.Fatal(err)
	}
	x := e.XDS
	if x == nil || x.ServerURL != "localhost:18000" || x.Node.GetId() != "default" || x.RetryInterval != 3*time.Second ||
		x.Backoff != (Backoff{Initial: 10 * time.Second, Max: time.Minute, Factor: 0.5, Jitter: true}) || x.TLS != nil {
		t.Fatalf("defaults: %+v", x)
	}
	e, err = ReadEnv(mapEnv(envWith("CONFIG_TYPE", "grpc_xds_sotw", "CONFIG_GRPC_XDS_SERVER_URL", "cp:9000", "CONFIG_GRPC_XDS_NODE_ID", "n1",
		"CONFIG_GRPC_XDS_NODE_METADATA", "a=1,b=x=y", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "X-Tenant:t1",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS", "true", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/ca", "CONFIG_GRPC_XDS_SERVER_TLS_SAN", "cp.local",
		"XDS_CLIENT_BACKOFF_JITTER", "false", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "8388608")))
	if err != nil {
		t.Fatal(err)
	}
	x = e.XDS
	md := x.Node.GetMetadata().GetFields()
	if x.ServerURL != "cp:9000" || x.Node.GetId() != "n1" || md["a"].GetStringValue() != "1" || md["b"].GetStringValue() != "x=y" ||
		x.Headers["x-tenant"] != "t1" || x.TLS == nil || x.TLS.ServerName != "cp.local" || x.Backoff.Jitter || x.MaxMsgSize != 8388608 {
		t.Errorf("read: %+v %+v", x, x.TLS)
	}
	for _, kv := range [][]string{
		{"CONFIG_TYPE", "GRPC_XDS_DELTA"}, {"CONFIG_GRPC_XDS_NODE_METADATA", "novalue"}, {"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "nocolon"},
		{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "soon"}, {"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "2"}, {"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/c"},
	} {
		env := envWith(kv...)
		if kv[0] != "CONFIG_TYPE" {
			env = envWith(append([]string{"CONFIG_TYPE", "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"}, kv...)...)
		}
		if _, err := ReadEnv(mapEnv(env)); err == nil || !strings.Contains(err.Error(), kv[0]) {
			t.Errorf("%v: %v", kv, err)
		}
	}
	e, err = ReadEnv(mapEnv(envWith("CONFIG_GRPC_XDS_SERVER_URL", "cp:1")))
	if err != nil || e.XDS != nil || !strings.Contains(strings.Join(e.Notes, " "), "CONFIG_GRPC_XDS_SERVER_URL=cp:1 is not used") {
		t.Errorf("under FILE: %+v %v", e, err)
	}
}

// TestDecodeXDS: RateLimitConfig resources decode as the files of a
// directory: nested descriptors, names, replaces, unlimited, shadow and
// quota modes and metadata; two resources of one domain are merged only
// when merging is on.
func TestDecodeXDS(t *testing.T) {
	md, _ := structpb.NewStruct(map[string]any{"team": "a"})
	rc := &rlsconf.RateLimitConfig{Name: "one", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "k", Value: "v", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "user", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 7, Name: "inner",
				Replaces: []*rlsconf.RateLimitReplace{{Name: "outer"}}}, ShadowMode: true, Metadata: md},
		}},
		{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_DAY, RequestsPerUnit: 3, Name: "outer"}, QuotaMode: true},
		{Key: "free", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}},
	}}
	other := &rlsconf.RateLimitConfig{Name: "two", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "z", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 1}}}}
	a, _ := anypb.New(rc)
	b, _ := anypb.New(other)
	cfg, err := DecodeXDS("xds:test", []*anypb.Any{a}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Domains) != 1 || len(cfg.Policies) != 2 || cfg.Source != "xds:test" {
		t.Fatalf("decoded %d domains, %d policies", len(cfg.Domains), len(cfg.Policies))
	}
	var inner, outer bool
	for _, p := range cfg.Policies {
		switch {
		case p.Limit == 7 && p.Shadow && p.EnvoyLimit.Name == "inner" && len(p.EnvoyLimit.Replaces) == 1 && p.EnvoyLimit.Window == time.Hour:
			inner = true
		case p.Limit == 3 && p.EnvoyLimit.Name == "outer" && p.EnvoyLimit.Window == 24*time.Hour:
			outer = true
		}
	}
	if !inner || !outer {
		t.Errorf("policies: %+v %+v", cfg.Policies[0], cfg.Policies[1])
	}
	if _, err := DecodeXDS("xds:test", []*anypb.Any{a, b}, false); err == nil || !strings.Contains(err.Error(), "MERGE_DOMAIN_CONFIG") {
		t.Errorf("one domain twice, unmerged: %v", err)
	}
	if cfg, err := DecodeXDS("xds:test", []*anypb.Any{a, b}, true); err != nil || len(cfg.Policies) != 3 {
		t.Errorf("merged: %v", err)
	}
	if _, err := DecodeXDS("xds:test", nil, false); err == nil {
		t.Error("no resources: accepted")
	}
	wrong, _ := anypb.New(structpb.NewStringValue("x"))
	if _, err := DecodeXDS("xds:test", []*anypb.Any{wrong}, false); err == nil {
		t.Error("a resource of another type: accepted")
	}
}

// TestXDSBackoff: the waits double from the initial interval up to the
// maximum, within the random factor around it when jittered.
func TestXDSBackoff(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: 5 * time.Second}
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second} {
		if got := b.wait(i); got != want {
			t.Errorf("wait %d: %v, want %v", i, got, want)
		}
	}
	if got := b.wait(100); got != 5*time.Second {
		t.Errorf("wait 100: %v", got)
	}
	b.Jitter, b.Factor = true, 0.5
	for range 200 {
		if got := b.wait(1); got < 1500*time.Millisecond || got > 2500*time.Millisecond {
			t.Fatalf("jittered wait %v outside 2s ±25%%", got)
		}
	}
}
