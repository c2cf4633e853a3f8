package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/sluicehq/sluice/valkeytest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// xdsServer is a go-control-plane management server in the test: a
// snapshot cache served over ADS (TLS, requiring a client certificate),
// noting the requests it receives.
type xdsServer struct {
	addr  string
	cache cachev3.SnapshotCache
	mu    sync.Mutex
	reqs  []*discoverygrpc.DiscoveryRequest
}

func startXDSServer(t *testing.T, tc *tls.Config) *xdsServer {
	t.Helper()
	x := &xdsServer{cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil)}
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, r *discoverygrpc.DiscoveryRequest) error {
		x.mu.Lock()
		x.reqs = append(x.reqs, r)
		x.mu.Unlock()
		return nil
	}}
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(tc)))
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(t.Context(), x.cache, cb))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(l)
	t.Cleanup(g.Stop)
	x.addr = l.Addr().String()
	return x
}

// push serves version of the configs to node.
func (x *xdsServer) push(t *testing.T, node, version string, configs ...*rlsconf.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(configs))
	for i, c := range configs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// answered waits for the client's ACK of version (a request of that
// version_info without an error) and returns it.
func (x *xdsServer) answered(t *testing.T, version string) *discoverygrpc.DiscoveryRequest {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		x.mu.Lock()
		for _, r := range x.reqs {
			if r.GetVersionInfo() == version && r.GetErrorDetail() == nil {
				x.mu.Unlock()
				return r
			}
		}
		x.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no answer to version %s", version)
	return nil
}

func xdsLimit(key string, perMinute uint32) *rlsconf.RateLimitDescriptor {
	return &rlsconf.RateLimitDescriptor{Key: key, RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: perMinute}}
}

// TestEnvoyXDSConfig: under CONFIG_TYPE=GRPC_XDS_SOTW the configuration
// comes from a go-control-plane management server (over TLS with a client
// certificate, for the node CONFIG_GRPC_XDS_NODE_ID names with the
// metadata CONFIG_GRPC_XDS_NODE_METADATA gives): decisions follow the
// first snapshot, then the second once pushed (ACKed); a third that does
// not decode is refused (NACKed) and the second keeps deciding.
func TestEnvoyXDSConfig(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA := newTestCA(t, "xds server CA"), newTestCA(t, "xds client CA")
	sc, sk := serverCA.issue(t, x509.ExtKeyUsageServerAuth, "xds.test")
	pair, err := tls.X509KeyPair(sc, sk)
	if err != nil {
		t.Fatal(err)
	}
	x := startXDSServer(t, &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: clientCA.pool, ClientAuth: tls.RequireAndVerifyClientCert})
	cc, ck := clientCA.issue(t, x509.ExtKeyUsageClientAuth, "sluice")
	const node = "sluice-node"
	// The first snapshot comes after the service started: it must not
	// serve (nor open a port) before.
	var pushedAt time.Time
	pushed := make(chan struct{})
	go func() {
		defer close(pushed)
		time.Sleep(time.Second)
		pushedAt = time.Now()
		x.push(t, node, "v1", &rlsconf.RateLimitConfig{Name: "first", Domain: "xd", Descriptors: []*rlsconf.RateLimitDescriptor{xdsLimit("k", 2)}})
	}()

	v := valkeytest.Shared(t)
	p := serve(t, []string{
		"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL=" + x.addr, "CONFIG_GRPC_XDS_NODE_ID=" + node,
		"CONFIG_GRPC_XDS_NODE_METADATA=cluster=east,zone=a", "CONFIG_GRPC_XDS_SERVER_USE_TLS=true",
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT=" + writeBytes(t, filepath.Join(dir, "ca.pem"), serverCA.pem),
		"CONFIG_GRPC_XDS_SERVER_TLS_SAN=xds.test",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT=" + writeBytes(t, filepath.Join(dir, "c.pem"), cc),
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY=" + writeBytes(t, filepath.Join(dir, "c.key"), ck),
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + v.Addr, "USE_STATSD=false", "LOG_FORMAT=json", "LOG_LEVEL=info",
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0", "CACHE_KEY_PREFIX=" + t.Name(),
	})
	servedAt := time.Now()
	<-pushed
	if servedAt.Before(pushedAt) || !strings.Contains(p.Logs(), "waiting for the first configuration") {
		t.Fatalf("served before the first snapshot:\n%s", p.Logs())
	}
	waitReady(t, p)
	ack := x.answered(t, "v1")
	if md := ack.GetNode().GetMetadata().GetFields(); ack.GetNode().GetId() != node || md["cluster"].GetStringValue() != "east" || md["zone"].GetStringValue() != "a" {
		t.Errorf("node %v", ack.GetNode())
	}
	conn, err := grpc.NewClient(p.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	ask := func(key, value string) *rlsv3.RateLimitResponse_DescriptorStatus {
		t.Helper()
		r, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "xd",
			Descriptors: []*commonrl.RateLimitDescriptor{{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return r.Statuses[0]
	}
	// Windows are aligned on the clock: keep the counting clear of a
	// minute's edge.
	if left := time.Minute - time.Duration(time.Now().UnixNano())%time.Minute; left < 10*time.Second {
		time.Sleep(left + 100*time.Millisecond)
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if st := ask("k", "a"); st.Code != want || st.CurrentLimit.GetRequestsPerUnit() != 2 {
			t.Fatalf("first snapshot, call %d: %v, want %v of a limit of 2", i, st, want)
		}
	}
	if st := ask("j", "a"); st.CurrentLimit != nil {
		t.Fatalf("j limited before the second snapshot: %v", st)
	}

	x.push(t, node, "v2", &rlsconf.RateLimitConfig{Name: "first", Domain: "xd", Descriptors: []*rlsconf.RateLimitDescriptor{xdsLimit("k", 5), xdsLimit("j", 1)}},
		&rlsconf.RateLimitConfig{Name: "second", Domain: "other", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "free", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}}}})
	x.answered(t, "v2")
	if st := ask("k", "b"); st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit.GetRequestsPerUnit() != 5 || st.LimitRemaining != 4 {
		t.Errorf("second snapshot: k is %v, want a limit of 5", st)
	}
	if st := ask("j", "a"); st.CurrentLimit.GetRequestsPerUnit() != 1 {
		t.Errorf("second snapshot: j is %v, want a limit of 1", st)
	}

	// A limit without a unit does not decode: refused, v2 keeps deciding.
	x.push(t, node, "v3", &rlsconf.RateLimitConfig{Name: "first", Domain: "xd", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{RequestsPerUnit: 9}}}})
	deadline := time.Now().Add(10 * time.Second)
	for {
		x.mu.Lock()
		last := x.reqs[len(x.reqs)-1]
		x.mu.Unlock()
		if d := last.GetErrorDetail(); d != nil {
			if !strings.Contains(d.GetMessage(), "unit") || last.GetVersionInfo() != "v2" {
				t.Errorf("NACK %q at version %q, want the missing unit named, v2 kept", d.GetMessage(), last.GetVersionInfo())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("v3 not refused:\n%s", p.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := ask("k", "c"); st.CurrentLimit.GetRequestsPerUnit() != 5 {
		t.Errorf("after the refused snapshot: k is %v, want v2's limit of 5", st)
	}
	if code, text := httpText(t, "GET", p.HTTP+"/metrics", ""); code != 200 || !strings.Contains(text, "ratelimit_service_config_load_error 1") {
		t.Errorf("the refused snapshot is not counted as a load error (%d)", code)
	}
}
