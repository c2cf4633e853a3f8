package envoy_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The Envoy of upstream's examples/envoy/proxy.yaml, emulated (Envoy is
// not installable here): its listener on 8888, whose routes each send
// ShouldRateLimit with the descriptors their rate_limits actions make, and
// route to the mock backends of examples/envoy/mock.yaml. Each rate_limits
// entry below is the one of proxy.yaml, in its order.

// action makes one entry of a descriptor, or none (the descriptor is then
// not sent, as Envoy skips a descriptor when an action has no value).
type action func(r *http.Request, served *backend) (commonrl.RateLimitDescriptor_Entry, bool)

// requestHeaders is Envoy's request_headers action.
func requestHeaders(header, key string) action {
	return func(r *http.Request, _ *backend) (commonrl.RateLimitDescriptor_Entry, bool) {
		v := r.Header.Get(header)
		return commonrl.RateLimitDescriptor_Entry{Key: key, Value: v}, v != ""
	}
}

// genericKey is Envoy's generic_key action.
func genericKey(key, value string) action {
	return func(*http.Request, *backend) (commonrl.RateLimitDescriptor_Entry, bool) {
		return commonrl.RateLimitDescriptor_Entry{Key: key, Value: value}, true
	}
}

// sourceCluster and destinationCluster are Envoy's actions of those names:
// the proxy's service cluster ("proxy": --service-cluster) and the route's.
func sourceCluster() action {
	return genericKey("source_cluster", "proxy")
}

func destinationCluster(cluster string) action {
	return genericKey("destination_cluster", cluster)
}

// localityName is the metadata action with source CLUSTER_LOCALITY_ENTRY,
// envoy.cluster.locality's name: the locality of the host that served the
// request (none when no host did).
func localityName(key string) action {
	return func(_ *http.Request, served *backend) (commonrl.RateLimitDescriptor_Entry, bool) {
		if served == nil {
			return commonrl.RateLimitDescriptor_Entry{}, false
		}
		return commonrl.RateLimitDescriptor_Entry{Key: key, Value: served.locality}, true
	}
}

type rateLimit struct {
	actions      []action
	hits         *uint64 // hits_addend.number
	onStreamDone bool    // apply_on_stream_done
}

func rl(actions ...action) rateLimit { return rateLimit{actions: actions} }

func hits(n uint64, done bool, actions ...action) rateLimit {
	return rateLimit{actions: actions, hits: &n, onStreamDone: done}
}

// backend is a host of a cluster: mock.yaml's direct responses.
type backend struct {
	body, service, locality string
}

var (
	service1 = &backend{body: "Hello World from Service 1", service: "service_1", locality: "service_1"}
	service2 = &backend{body: "Hello World from Service 2", service: "service_2", locality: "service_2"}
)

type route struct {
	prefix, cluster string
	rateLimits      []rateLimit
}

// proxyRoutes are proxy.yaml's routes (typed_per_filter_config's
// rate_limits where the route has them: INCLUDE_POLICY with no route
// policy of its own).
var proxyRoutes = []route{
	{"/test", "mock", []rateLimit{rl(sourceCluster(), destinationCluster("mock"))}},
	{"/header", "mock", []rateLimit{rl(requestHeaders("foo", "foo"))}},
	{"/twoheader", "mock", []rateLimit{
		rl(requestHeaders("foo", "foo"), requestHeaders("bar", "bar")),
		rl(requestHeaders("foo", "foo"), requestHeaders("baz", "baz"))}},
	{"/fourheader", "mock", []rateLimit{
		rl(requestHeaders("foo", "foo"), requestHeaders("bar", "bar")),
		rl(requestHeaders("source_cluster", "source_cluster"), requestHeaders("destination_cluster", "destination_cluster"))}},
	{"/fiveheader", "mock", []rateLimit{
		rl(requestHeaders("foo", "foo"), requestHeaders("bar", "bar")),
		rl(requestHeaders("source_cluster", "source_cluster"), requestHeaders("destination_cluster", "destination_cluster")),
		rl(requestHeaders("category", "category"))}},
	{"/unspec", "mock", []rateLimit{rl(requestHeaders("unspec", "unspec"))}},
	{"/quota", "mock", []rateLimit{rl(genericKey("service", "service_1")), rl(genericKey("service", "service_2"))}},
	{"/tokenquota", "mock", []rateLimit{
		hits(0, false, genericKey("service", "service_2")),
		hits(1, true, genericKey("service", "service_2"))}},
	{"/multiservice-tokenquota", "multiservice", []rateLimit{
		hits(0, false, genericKey("service", "service_1")),
		hits(0, false, genericKey("service", "service_2")),
		hits(1, true, localityName("service"))}},
}

// emulatedEnvoy is the proxy: its rate-limit filter (domain rl,
// failure_mode_deny false, x-ratelimit headers DRAFT_VERSION_03), the
// header mutation and header-to-metadata filters that pick the
// multiservice subset from the answer's dynamic metadata, and the router.
type emulatedEnvoy struct {
	rls rlsv3.RateLimitServiceClient
	mu  sync.Mutex
	rr  int // the multiservice cluster's round robin (fallback ANY_ENDPOINT)
}

func (e *emulatedEnvoy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var rt *route
	for i := range proxyRoutes {
		if strings.HasPrefix(r.URL.Path, proxyRoutes[i].prefix) {
			rt = &proxyRoutes[i]
			break
		}
	}
	if rt == nil {
		http.NotFound(w, r)
		return
	}
	resp, err := e.ask(r.Context(), r, rt, false, nil)
	if resp != nil {
		xRateLimitHeaders(w.Header(), resp.GetStatuses())
	}
	served := (*backend)(nil)
	if err == nil && resp != nil && resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		w.Header().Set("x-envoy-ratelimited", "true")
		w.WriteHeader(http.StatusTooManyRequests)
	} else {
		// An error is allowed through (failure_mode_deny: false).
		served = e.pick(rt, resp)
		io.WriteString(w, served.body)
	}
	// Stream done: the descriptors applied on stream done, their answer
	// unused.
	e.ask(context.WithoutCancel(r.Context()), r, rt, true, served)
}

// ask sends the route's descriptors of one phase; nil when there are none.
func (e *emulatedEnvoy) ask(ctx context.Context, r *http.Request, rt *route, streamDone bool, served *backend) (*rlsv3.RateLimitResponse, error) {
	req := &rlsv3.RateLimitRequest{Domain: "rl"}
	for _, lim := range rt.rateLimits {
		if lim.onStreamDone != streamDone {
			continue
		}
		d := &commonrl.RateLimitDescriptor{}
		ok := true
		for _, a := range lim.actions {
			entry, has := a(r, served)
			if !has {
				ok = false
				break
			}
			d.Entries = append(d.Entries, &entry)
		}
		if !ok {
			continue
		}
		if lim.hits != nil {
			d.HitsAddend = wrapperspb.UInt64(*lim.hits)
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	if len(req.Descriptors) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return e.rls.ShouldRateLimit(ctx, req)
}

// pick is the host that serves: mock's, or in the multiservice cluster the
// subset whose service is x-envoy-service-with-quota, set from the
// answer's dynamic metadata metadata.service_with_quota.name; any host
// (round robin) when it names none.
func (e *emulatedEnvoy) pick(rt *route, resp *rlsv3.RateLimitResponse) *backend {
	if rt.cluster != "multiservice" {
		return service1
	}
	name := resp.GetDynamicMetadata().GetFields()["metadata"].GetStructValue().GetFields()["service_with_quota"].GetStructValue().GetFields()["name"].GetStringValue()
	for _, b := range []*backend{service1, service2} {
		if b.service == name {
			return b
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rr++
	return []*backend{service1, service2}[e.rr%2]
}

// xRateLimitHeaders adds Envoy's DRAFT_VERSION_03 headers from the status
// with the fewest remaining among those with a limit.
func xRateLimitHeaders(h http.Header, statuses []*rlsv3.RateLimitResponse_DescriptorStatus) {
	var min *rlsv3.RateLimitResponse_DescriptorStatus
	for _, s := range statuses {
		if s.GetCurrentLimit() == nil {
			continue
		}
		if min == nil || s.GetLimitRemaining() < min.GetLimitRemaining() {
			min = s
		}
	}
	if min == nil {
		return
	}
	window := map[rlsv3.RateLimitResponse_RateLimit_Unit]int{rlsv3.RateLimitResponse_RateLimit_SECOND: 1, rlsv3.RateLimitResponse_RateLimit_MINUTE: 60,
		rlsv3.RateLimitResponse_RateLimit_HOUR: 3600, rlsv3.RateLimitResponse_RateLimit_DAY: 86400}[min.GetCurrentLimit().GetUnit()]
	h.Set("x-ratelimit-limit", fmt.Sprintf("%d, %d;w=%d", min.GetCurrentLimit().GetRequestsPerUnit(), min.GetCurrentLimit().GetRequestsPerUnit(), window))
	h.Set("x-ratelimit-remaining", strconv.Itoa(int(min.GetLimitRemaining())))
	h.Set("x-ratelimit-reset", strconv.Itoa(int(min.GetDurationUntilReset().GetSeconds())))
}

// sluiceFor starts sluice serve as upstream's docker-compose starts its
// service (integration-test/docker-compose-integration-test.yml), with
// USE_STATSD=false: the statistics the scripts read from the statsd
// exporter's /metrics are on Sluice's own /metrics, under the names of
// upstream's mapping. It returns the HTTP and gRPC addresses.
func sluiceFor(t *testing.T, bin, valkeyAddr, runtimeRoot, prefix string) (string, string) {
	t.Helper()
	ports := freePortsN(t, 3)
	cmd := exec.Command(bin, "serve")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "USE_STATSD=false", "LOG_LEVEL=debug", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + valkeyAddr,
		"RUNTIME_ROOT=" + runtimeRoot, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false", "RESPONSE_DYNAMIC_METADATA=true",
		"HOST=127.0.0.1", "PORT=" + strconv.Itoa(ports[0]), "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(ports[1]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strconv.Itoa(ports[2]), "CACHE_KEY_PREFIX=" + prefix}
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("sluice serve's log (tail):\n%s", tail(logs.String(), 3000))
		}
	})
	grpcAddr := "127.0.0.1:" + strconv.Itoa(ports[1])
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-done:
			t.Fatalf("sluice serve exited:\n%s", logs.String())
		default:
		}
		if c, err := net.DialTimeout("tcp", grpcAddr, 200*time.Millisecond); err == nil {
			c.Close()
			return "127.0.0.1:" + strconv.Itoa(ports[0]), grpcAddr
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice serve did not open its gRPC port:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freePortsN(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// TestUpstreamScripts runs upstream's integration-test/scripts/*.sh,
// unchanged, each against a sluice serve of its own (their state apart:
// three of them wait a minute for the windows to turn, so they run side by
// side) behind the emulated Envoy; curl reaches envoy-proxy:8888 and
// statsd:9102 through a .curlrc's connect-to lines.
func TestUpstreamScripts(t *testing.T) {
	t.Parallel() // the other of TestUpstreamIntegration and TestUpstreamScripts mostly waits
	require(t, "valkey-server", "bash scripts/install-valkey.sh (from the repository root)")
	require(t, "curl", "apt-get install -y curl")
	require(t, "bash", "apt-get install -y bash")
	bin := buildSluice(t)
	vport := freePortsN(t, 1)[0]
	valkey(t, vport)
	up := filepath.Join("testdata", "upstream")
	runtimeRoot := t.TempDir()
	copyTree(t, filepath.Join(up, "examples", "ratelimit", "config"), filepath.Join(runtimeRoot, "ratelimit", "config"))
	scripts, err := filepath.Glob(filepath.Join(up, "integration-test", "scripts", "*.sh"))
	if err != nil || len(scripts) == 0 {
		t.Fatalf("upstream's scripts: %v %v", scripts, err)
	}
	sort.Strings(scripts)
	// Windows are aligned on the minute: start clear of its edge, so that
	// no script's steps straddle it.
	if s := time.Now().Second(); s > 50 {
		time.Sleep(time.Duration(61-s) * time.Second)
	}
	type run struct {
		name string
		done chan struct{}
		out  []byte
		err  error
	}
	var runs []*run
	for _, script := range scripts {
		r := &run{name: filepath.Base(script), done: make(chan struct{})}
		runs = append(runs, r)
		httpAddr, grpcAddr := sluiceFor(t, bin, "127.0.0.1:"+strconv.Itoa(vport), runtimeRoot, strings.TrimSuffix(r.name, ".sh")+":")
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: &emulatedEnvoy{rls: rlsv3.NewRateLimitServiceClient(conn)}}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
		home := t.TempDir()
		curlrc := fmt.Sprintf("connect-to = \"envoy-proxy:8888:%s\"\nconnect-to = \"statsd:9102:%s\"\n", l.Addr(), httpAddr)
		if err := os.WriteFile(filepath.Join(home, ".curlrc"), []byte(curlrc), 0o644); err != nil {
			t.Fatal(err)
		}
		abs, _ := filepath.Abs(script)
		cmd := exec.Command("bash", abs)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "CURL_HOME=" + home}
		go func() { r.out, r.err = cmd.CombinedOutput(); close(r.done) }()
	}
	// The scripts run side by side (three wait a minute); each is reported
	// as a case of its own.
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			<-r.done
			if r.err != nil {
				t.Errorf("upstream's %s fails against sluice serve: %v\n%s", r.name, r.err, r.out)
			}
		})
	}
}
