package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice/valkeytest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

const quotaE2EYAML = `
admin: {token_env: SLUICE_ADMIN_TOKEN}
policies:
  - {name: messages, algorithm: fixed_window, limit: 3, period: day, zone: America/Los_Angeles, overrides: true, plans: {pro: {limit: 5}}}
domains:
  - domain: edge
    descriptors:
      - key: tenant
        policy: messages
        descriptors:
          - {key: plan, policy: messages, plan_entry: true}
`

// TestE2EQuotas: a daily quota in Los Angeles, a plan change and an
// override through the sluice binary, over HTTP and Envoy's gRPC, on one
// Valkey and on a Cluster: the two protocols count on the same keys, and
// the override set over HTTP applies to the gRPC decisions. An Envoy
// descriptor counts under domain:key:value (edge:tenant:acme), the key an
// override names.
func TestE2EQuotas(t *testing.T) {
	const token = "e2e-admin-token-quota-7c1d"
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfg, quotaE2EYAML)
	srv := valkeytest.Start(t)
	cl := valkeytest.StartCluster(t, 3)
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, valkey string }{{"standalone", srv.Addr}, {"cluster", cl.Addrs[0] + "," + cl.Addrs[1]}} {
		t.Run(tc.name, func(t *testing.T) {
			p := serve(t, []string{"SLUICE_ADMIN_TOKEN=" + token}, "--config", cfg, "--valkey", tc.valkey)
			waitReady(t, p)
			before := time.Now()
			_, m := post(t, p.HTTP+"/v1/check", `{"policy":"messages","key":"edge:tenant:acme","cost":2}`)
			y, mo, d := before.In(la).Date()
			midnight := time.Date(y, mo, d+1, 0, 0, 0, 0, la)
			reset := time.Duration(m["reset_after_ms"].(float64)) * time.Millisecond
			if m["allowed"] != true || m["remaining"] != 1.0 || reset > midnight.Sub(before)+time.Second || reset < midnight.Sub(time.Now())-2*time.Second {
				t.Fatalf("daily quota: %v, want reset at midnight in Los Angeles (%v)", m, midnight.Sub(before))
			}
			conn, err := grpc.NewClient(p.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			rls := rlsv3.NewRateLimitServiceClient(conn)
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{
				{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}}},
			}}
			// The third unit of the day, through Envoy's protocol, on the same count.
			r, err := rls.ShouldRateLimit(t.Context(), req)
			if err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 0 {
				t.Fatalf("envoy: %v %v", r, err)
			}
			if r, err = rls.ShouldRateLimit(t.Context(), req); err != nil || r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("envoy over the day's quota: %v %v", r, err)
			}
			if _, m := post(t, p.HTTP+"/v1/check", `{"policy":"messages","key":"edge:tenant:acme","plan":"pro"}`); m["allowed"] != true || m["remaining"] != 1.0 || m["source"] != "plan" {
				t.Fatalf("plan: %v", m)
			}
			// The plan as a descriptor entry: the same count (4 taken), pro's limit.
			planReq := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{
				{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}, {Key: "plan", Value: "pro"}}},
			}}
			if r, err = rls.ShouldRateLimit(t.Context(), planReq); err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK ||
				r.Statuses[0].LimitRemaining != 0 || r.Statuses[0].CurrentLimit.RequestsPerUnit != 5 {
				t.Fatalf("envoy with plan pro: %v %v", r, err)
			}
			planReq.Descriptors[0].Entries[1].Value = "gold"
			if r, err = rls.ShouldRateLimit(t.Context(), planReq); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `plan "gold" is not a plan of policy "messages"`) {
				t.Fatalf("envoy with an unknown plan: %v %v, want InvalidArgument", r, err)
			}
			exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
			if code, m := request(t, "PUT", p.HTTP+"/v1/overrides/messages/edge:tenant:acme", `{"limit":10,"expires":"`+exp+`","reason":"e2e"}`, token); code != 200 {
				t.Fatalf("PUT override: %d %v", code, m)
			}
			if r, err = rls.ShouldRateLimit(t.Context(), req); err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 4 {
				t.Fatalf("envoy under the override (10, 6 taken): %v %v", r, err)
			}
			if code, _ := request(t, "DELETE", p.HTTP+"/v1/overrides/messages/edge:tenant:acme", "", token); code != 200 {
				t.Fatalf("DELETE override: %d", code)
			}
			if r, err = rls.ShouldRateLimit(t.Context(), req); err != nil || r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("envoy after the override's removal: %v %v", r, err)
			}
			if code := p.Stop(); code != 0 {
				t.Errorf("exit code %d", code)
			}
		})
	}
}
