package server

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"strings"
	"testing"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// The benchmarks' configurations: one token-bucket policy, and one Envoy
// domain limiting remote_address far above what a benchmark sends.
const (
	benchPolicyYAML = "policies:\n  - {name: bench, algorithm: token_bucket, burst: 100, rate: 10/s}\n"
	benchEnvoyYAML  = "domain: bench\ndescriptors:\n  - {key: remote_address, rate_limit: {unit: second, requests_per_unit: 1000000}}\n"
)

// benchServer is a Server on the memory store for the configuration yaml.
func benchServer(b *testing.B, yaml string) *Server {
	b.Helper()
	cfg, err := config.Parse("bench.yaml", []byte(yaml))
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(cfg, Options{Store: memstore.New(), Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// benchPost times POST path through s's handler, httptest's request and
// recorder included, with bodies made from format and 10,000 distinct
// numbers before the timer; every answer must be 200.
func benchPost(b *testing.B, s *Server, path, format string) {
	b.Helper()
	h := s.Handler()
	bodies := make([]string, 10000)
	for i := range bodies {
		bodies[i] = fmt.Sprintf(format, i)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", path, strings.NewReader(bodies[i%len(bodies)])))
		if w.Code != 200 {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
	}
}

// BenchmarkCheck measures POST /v1/check in process (memory store), on
// 10,000 distinct keys prepared before the timer.
func BenchmarkCheck(b *testing.B) {
	s := benchServer(b, benchPolicyYAML)
	benchPost(b, s, "/v1/check", `{"policy":"bench","key":"user-%d","cost":1}`)
}

// BenchmarkShouldRateLimit measures one Envoy call in process (memory
// store, no gRPC transport nor its call metrics), one descriptor, on 10,000 distinct values
// prepared before the timer.
func BenchmarkShouldRateLimit(b *testing.B) {
	s := benchServer(b, benchEnvoyYAML)
	reqs := make([]*rlsv3.RateLimitRequest, 10000)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonrl.RateLimitDescriptor{desc("remote_address", fmt.Sprint(i))}}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		resp, err := s.envoy.Decide(b.Context(), reqs[i%len(reqs)])
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			b.Fatalf("%v %v", resp, err)
		}
	}
}

// BenchmarkJSON measures envoyproxy/ratelimit's POST /json in process
// (memory store), one descriptor, on 10,000 distinct values prepared before
// the timer, httptest's request and recorder included.
func BenchmarkJSON(b *testing.B) {
	s := benchServer(b, benchEnvoyYAML)
	benchPost(b, s, "/json", `{"domain":"bench","descriptors":[{"entries":[{"key":"remote_address","value":"%d"}]}]}`)
}

// BenchmarkShouldRateLimitGRPC measures one Envoy call through gRPC over an
// in-memory connection (bufconn): the codec, the interceptors and the
// transport of both sides included, no network.
func BenchmarkShouldRateLimitGRPC(b *testing.B) {
	s := benchServer(b, benchEnvoyYAML)
	l := bufconn.Listen(1 << 20)
	g := s.NewGRPCServer()
	go g.Serve(l)
	defer g.Stop()
	conn, err := grpc.NewClient("passthrough:///bufconn", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return l.DialContext(ctx) }))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	reqs := make([]*rlsv3.RateLimitRequest, 10000)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonrl.RateLimitDescriptor{desc("remote_address", fmt.Sprint(i))}}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		resp, err := c.ShouldRateLimit(b.Context(), reqs[i%len(reqs)])
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			b.Fatalf("%v %v", resp, err)
		}
	}
}
