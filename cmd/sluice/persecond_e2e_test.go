package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const perSecondConfig = `
domain: ps
descriptors:
  - key: fast
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: slow
    rate_limit: {unit: minute, requests_per_unit: 1000}
`

// perSecondCalls sends, through gRPC, one call of a SECOND limit, one of a
// MINUTE limit and one per-request override of unit SECOND, and returns
// the keys found on main and on perSecond afterwards.
func perSecondCalls(t *testing.T, p *proc, main, perSecond valkey.Client) (mainKeys, psKeys string) {
	t.Helper()
	conn, err := grpc.NewClient(p.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	waitReady(t, p)
	entry := func(k, v string) []*commonrl.RateLimitDescriptor_Entry {
		return []*commonrl.RateLimitDescriptor_Entry{{Key: k, Value: v}}
	}
	for _, d := range []*commonrl.RateLimitDescriptor{
		{Entries: entry("fast", "f1")},
		{Entries: entry("slow", "s1")},
		{Entries: entry("other", "o1"), Limit: &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1000, Unit: typev3.RateLimitUnit_SECOND}},
	} {
		r, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "ps", Descriptors: []*commonrl.RateLimitDescriptor{d}})
		if err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 999 {
			t.Fatalf("%v: %v %v", d, r, err)
		}
	}
	keys := func(c valkey.Client) string {
		k, err := valkeytest.Keys(t.Context(), c, "*"+perSecondPrefix(t)+"*")
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(k, " ")
	}
	return keys(main), keys(perSecond)
}

// perSecondPrefix is the test's CACHE_KEY_PREFIX, so that only its keys
// are looked at on a shared server.
func perSecondPrefix(t *testing.T) string { return "ps" + strings.ReplaceAll(t.Name(), "/", "_") }

// checkSplit: the SECOND limit's and the SECOND override's counters are
// on the per-second Valkey, the MINUTE limit's on the main one, and each
// only there.
func checkSplit(t *testing.T, mainKeys, psKeys string) {
	t.Helper()
	if !strings.Contains(psKeys, "envoy.1s") || !strings.Contains(psKeys, "f1") || !strings.Contains(psKeys, "o1") || strings.Contains(psKeys, "envoy.60s") {
		t.Errorf("per-second Valkey holds %q; want the counters of f1 and o1 (envoy.1s) only", psKeys)
	}
	if !strings.Contains(mainKeys, "envoy.60s") || strings.Contains(mainKeys, "envoy.1s") {
		t.Errorf("main Valkey holds %q; want the counter of s1 (envoy.60s) only", mainKeys)
	}
}

// TestEnvoyPerSecondRedis: under REDIS_PERSECOND=true, the counters of
// limits of unit SECOND live on REDIS_PERSECOND_URL's Valkey (here
// requiring the password REDIS_PERSECOND_AUTH gives, as user:password),
// the others on REDIS_URL's, as envoyproxy/ratelimit splits them.
func TestEnvoyPerSecondRedis(t *testing.T) {
	main, ps := valkeytest.Start(t), valkeytest.Start(t)
	ps.RequirePass(t, "pspw")
	root := t.TempDir()
	runtimeTree(t, root, "v1", map[string]string{"ps.yaml": perSecondConfig})
	p := serve(t, []string{
		"RUNTIME_ROOT=" + filepath.Join(root, "current"), "RUNTIME_SUBDIRECTORY=ratelimit",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + main.Addr, "USE_STATSD=false", "LOG_FORMAT=json", "LOG_LEVEL=info",
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0",
		"REDIS_PERSECOND=true", "REDIS_PERSECOND_SOCKET_TYPE=tcp", "REDIS_PERSECOND_URL=" + ps.Addr,
		"REDIS_PERSECOND_AUTH=default:pspw", "REDIS_PERSECOND_TIMEOUT=200ms", "CACHE_KEY_PREFIX=" + perSecondPrefix(t),
	})
	mk, pk := perSecondCalls(t, p, main.Client(t), ps.Client(t, func(o *valkey.ClientOption) { o.Password = "pspw" }))
	checkSplit(t, mk, pk)
	// The per-second Valkey's breaker is exported beside the main one's,
	// its node named apart.
	_, metrics := httpText(t, "GET", p.HTTP+"/metrics", "")
	for _, want := range []string{
		`sluice_valkey_breaker_state{node="` + main.Addr + `",state="closed"} 1`,
		`sluice_valkey_breaker_state{node="persecond/` + ps.Addr + `",state="closed"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines([]byte(metrics), "sluice_valkey_"))
		}
	}
	// /readyz checks the per-second Valkey too.
	ps.Kill(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _ := httpText(t, "GET", p.HTTP+"/readyz", "")
		if code == 503 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz answers %d with the per-second Valkey down", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEnvoyPerSecondSentinel: REDIS_PERSECOND_TYPE=sentinel finds the
// per-second Valkey through its Sentinels (REDIS_PERSECOND_URL=<master
// name>,<sentinel>), beside a standalone main one.
func TestEnvoyPerSecondSentinel(t *testing.T) {
	main, primary := valkeytest.Start(t), valkeytest.Start(t)
	ss := valkeytest.StartSentinels(t, primary, 1, 0)
	root := t.TempDir()
	runtimeTree(t, root, "v1", map[string]string{"ps.yaml": perSecondConfig})
	p := serve(t, []string{
		"RUNTIME_ROOT=" + filepath.Join(root, "current"), "RUNTIME_SUBDIRECTORY=ratelimit",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + main.Addr, "USE_STATSD=false", "LOG_FORMAT=json", "LOG_LEVEL=info",
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0",
		"REDIS_PERSECOND=true", "REDIS_PERSECOND_SOCKET_TYPE=tcp", "REDIS_PERSECOND_TYPE=sentinel",
		"REDIS_PERSECOND_URL=" + valkeytest.SentinelMaster + "," + ss.Addrs[0], "CACHE_KEY_PREFIX=" + perSecondPrefix(t),
	})
	mk, pk := perSecondCalls(t, p, main.Client(t), primary.Client(t))
	checkSplit(t, mk, pk)
}

// TestEnvoyPerSecondCluster: REDIS_PERSECOND_TYPE=cluster puts the
// per-second counters on a Valkey Cluster (REDIS_PERSECOND_URL its seed
// addresses), beside a standalone main one.
func TestEnvoyPerSecondCluster(t *testing.T) {
	main, cl := valkeytest.Start(t), valkeytest.SharedCluster(t)
	root := t.TempDir()
	runtimeTree(t, root, "v1", map[string]string{"ps.yaml": perSecondConfig})
	p := serve(t, []string{
		"RUNTIME_ROOT=" + filepath.Join(root, "current"), "RUNTIME_SUBDIRECTORY=ratelimit",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + main.Addr, "USE_STATSD=false", "LOG_FORMAT=json", "LOG_LEVEL=info",
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0",
		"REDIS_PERSECOND=true", "REDIS_PERSECOND_SOCKET_TYPE=tcp", "REDIS_PERSECOND_TYPE=cluster",
		"REDIS_PERSECOND_URL=" + strings.Join(cl.Addrs, ","), "CACHE_KEY_PREFIX=" + perSecondPrefix(t),
	})
	mk, pk := perSecondCalls(t, p, main.Client(t), cl.Client(t))
	checkSplit(t, mk, pk)
}
