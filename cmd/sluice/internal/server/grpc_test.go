package server

import (
	"fmt"
	"net"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// envoyYAML is in envoyproxy/ratelimit's own format.
const envoyYAML = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 3
    descriptors:
      - key: path
        value: /login
        rate_limit: {unit: hour, requests_per_unit: 1}
  - key: api_key
    value: dark
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: internal
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
`

// startGRPC serves s over real TCP and returns a client.
func startGRPC(t *testing.T, yaml string) rlsv3.RateLimitServiceClient {
	t.Helper()
	return rlsv3.NewRateLimitServiceClient(startGRPCConn(t, yaml))
}

func startGRPCConn(t *testing.T, yaml string) *grpc.ClientConn {
	t.Helper()
	cfg, err := config.Parse("envoy.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, Options{Store: memstore.New(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := s.NewGRPCServer()
	go g.Serve(l)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestGRPCHealth(t *testing.T) {
	conn := startGRPCConn(t, envoyYAML)
	r, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("%v %v", r, err)
	}
}

func desc(kv ...string) *commonrl.RateLimitDescriptor {
	d := &commonrl.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonrl.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func TestEnvoyRLS(t *testing.T) {
	c := startGRPC(t, envoyYAML)
	ctx := t.Context()
	ask := func(hits uint32, ds ...*commonrl.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds, HitsAddend: hits})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Statuses) != len(ds) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(ds))
		}
		return resp
	}
	OK, OVER := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT

	// 3 per minute per address: OK with 2, 1, 0 remaining, then OVER_LIMIT.
	for i, want := range []uint32{2, 1, 0} {
		r := ask(0, desc("remote_address", "10.0.0.1"))
		st := r.Statuses[0]
		if r.OverallCode != OK || st.Code != OK || st.LimitRemaining != want {
			t.Fatalf("request %d: %v", i, r)
		}
		if st.CurrentLimit.GetRequestsPerUnit() != 3 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
			t.Fatalf("current limit: %v", st.CurrentLimit)
		}
		if d := st.DurationUntilReset.AsDuration(); d <= 0 || d > time.Minute {
			t.Fatalf("duration_until_reset = %v", d)
		}
	}
	r := ask(0, desc("remote_address", "10.0.0.1"))
	if r.OverallCode != OVER || r.Statuses[0].Code != OVER || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("fourth: %v", r)
	}
	// Another address has its own counter; hits_addend is the cost.
	r = ask(2, desc("remote_address", "10.0.0.2"))
	if r.Statuses[0].Code != OK || r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("hits_addend 2: %v", r)
	}
	// A descriptor's own hits_addend overrides the request's.
	d := desc("remote_address", "10.0.0.3")
	d.HitsAddend = wrapperspb.UInt64(3)
	if r = ask(1, d); r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("descriptor hits_addend: %v", r)
	}
	// More than the limit could never be allowed.
	if r = ask(4, desc("remote_address", "10.0.0.4")); r.OverallCode != OVER {
		t.Fatalf("hits above the limit: %v", r)
	}

	// Nested: address + path /login, 1 per hour; another path matches
	// nothing (the request is deeper than the tree allows).
	if r = ask(0, desc("remote_address", "10.0.0.5", "path", "/login")); r.Statuses[0].Code != OK || r.Statuses[0].CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
		t.Fatalf("nested: %v", r)
	}
	if r = ask(0, desc("remote_address", "10.0.0.5", "path", "/login")); r.OverallCode != OVER {
		t.Fatalf("nested second: %v", r)
	}
	if r = ask(0, desc("remote_address", "10.0.0.5", "path", "/other")); r.OverallCode != OK || r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("unmatched path: %v", r)
	}

	// shadow_mode: never OVER_LIMIT.
	for i := 0; i < 3; i++ {
		if r = ask(0, desc("api_key", "dark")); r.OverallCode != OK {
			t.Fatalf("shadow %d: %v", i, r)
		}
	}
	// unlimited and requests_per_unit: 0.
	if r = ask(0, desc("internal", "x")); r.OverallCode != OK {
		t.Fatalf("unlimited: %v", r)
	}
	if r = ask(0, desc("blocked", "x")); r.OverallCode != OVER {
		t.Fatalf("blocked: %v", r)
	}
	// Several descriptors: OVER_LIMIT overall when any is; each counts
	// its own hits, as envoyproxy/ratelimit does, so 10.0.0.9 was charged.
	r = ask(0, desc("remote_address", "10.0.0.9"), desc("blocked", "y"))
	if r.OverallCode != OVER || r.Statuses[0].Code != OK || r.Statuses[1].Code != OVER {
		t.Fatalf("two descriptors: %v", r)
	}
	r = ask(0, desc("remote_address", "10.0.0.9"))
	if r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("two descriptors: the allowed one was not charged: %v", r)
	}
	// Unknown domains and descriptors limit nothing: every descriptor is
	// answered OK (one descriptor, and more than one).
	for _, n := range []int{1, 3} {
		req := &rlsv3.RateLimitRequest{Domain: "other"}
		for i := range n {
			req.Descriptors = append(req.Descriptors, desc("remote_address", fmt.Sprint(i)))
		}
		resp, err := c.ShouldRateLimit(ctx, req)
		if err != nil || resp.OverallCode != OK || len(resp.Statuses) != n {
			t.Fatalf("unknown domain, %d descriptors: %v %v", n, resp, err)
		}
		for i, ds := range resp.Statuses {
			if ds.Code != OK || ds.CurrentLimit != nil || ds.LimitRemaining != 0 {
				t.Fatalf("unknown domain, %d descriptors: status %d: %v", n, i, ds)
			}
		}
	}
	// Per-request limit override: 1 per hour for this descriptor (an hour,
	// so that the two requests do not straddle a window edge).
	d = desc("remote_address", "10.0.0.10")
	d.Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
	if r = ask(0, d); r.OverallCode != OK || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1 {
		t.Fatalf("override: %v", r)
	}
	if r = ask(0, d); r.OverallCode != OVER {
		t.Fatalf("override second: %v", r)
	}
}

func TestEnvoyRLSInvalid(t *testing.T) {
	c := startGRPC(t, envoyYAML)
	for name, req := range map[string]*rlsv3.RateLimitRequest{
		"no domain":      {Descriptors: []*commonrl.RateLimitDescriptor{desc("a", "b")}},
		"no descriptors": {Domain: "edge"},
		"unknown override unit": {Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{{Entries: desc("remote_address", "1").Entries,
			Limit: &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}}}},
	} {
		_, err := c.ShouldRateLimit(t.Context(), req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestEnvoySluicePolicies: Sluice's own format maps descriptors to policies
// of any algorithm.
func TestEnvoySluicePolicies(t *testing.T) {
	c := startGRPC(t, `
policies:
  - {name: api, algorithm: token_bucket, burst: 2, rate: 1/h}
domains:
  - domain: edge
    descriptors:
      - {key: api_key, policy: api}
`)
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		r, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{desc("api_key", "k1")}})
		if err != nil {
			t.Fatal(err)
		}
		if r.OverallCode != want || r.Statuses[0].CurrentLimit.GetName() != "api" {
			t.Fatalf("request %d: %v", i, r)
		}
	}
}
