package envoy

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
)

// fakeServer is the least a Server is: a configuration, its policies, and
// the refusals it is told of. Override limiters are built on each call.
type fakeServer struct {
	st      *fakeState
	refused []string
}

func (f *fakeServer) Current() State {
	if f.st == nil {
		return nil
	}
	return f.st
}

func (f *fakeServer) NoteRefused(p *config.Policy, key string, res sluice.Result) {
	if !res.Allowed {
		f.refused = append(f.refused, p.Name+" "+key)
	}
}

type fakeState struct {
	cfg      *config.Config
	policies map[string]*fakePolicy
	store    driver.Store
}

func (s *fakeState) Config() *config.Config { return s.cfg }

func (s *fakeState) Policy(name string) Policy {
	if p := s.policies[name]; p != nil {
		return p
	}
	return nil
}

// Override builds the limiter of a per-request limit as the server does:
// envoyproxy/ratelimit's fixed window, counted under the window's name.
func (s *fakeState) Override(limit int64, window time.Duration, counting config.Counting) (Policy, error) {
	pol := config.EnvoyWindow(limit, window, counting)
	name := config.EnvoyLimiter(window)
	lim, err := sluice.New(s.store, pol, sluice.WithName(name))
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	shade, err := sluice.New(s.store, pol, sluice.WithName(name), sluice.WithShadow(true))
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &fakePolicy{cfg: &config.Policy{Name: "override", Algorithm: driver.AlgorithmFixedWindow, Policy: pol, Limit: limit, Envoy: true, Limiter: name}, lim: lim, shade: shade}, nil
}

type fakePolicy struct {
	cfg        *config.Policy
	lim, shade *sluice.Limiter
}

func (p *fakePolicy) Config() *config.Policy   { return p.cfg }
func (p *fakePolicy) Limiter() *sluice.Limiter { return p.lim }
func (p *fakePolicy) Shadow() *sluice.Limiter  { return p.shade }

func newFake(t *testing.T, yaml string) *fakeServer {
	t.Helper()
	cfg, err := config.Parse("fake.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New()
	st := &fakeState{cfg: cfg, policies: map[string]*fakePolicy{}, store: store}
	for _, p := range cfg.Policies {
		lim, err := sluice.New(store, p.Policy, sluice.WithName(p.Limiter))
		if err != nil {
			t.Fatal(err)
		}
		shade, err := sluice.New(store, p.Policy, sluice.WithName(p.Limiter), sluice.WithShadow(true))
		if err != nil {
			t.Fatal(err)
		}
		st.policies[p.Name] = &fakePolicy{cfg: p, lim: lim, shade: shade}
	}
	return &fakeServer{st: st}
}

// TestServiceOnItsInterface: the service needs of a server only what
// Server asks: it decides a domain's descriptors with the policies the
// server looks up and tells it of the refusals; before any configuration
// it refuses to decide (UNAVAILABLE) and its health check fails.
func TestServiceOnItsInterface(t *testing.T) {
	f := newFake(t, `
policies:
  - {name: api, algorithm: fixed_window, limit: 2, window: 1h}
domains:
  - domain: edge
    descriptors:
      - {key: api_key, policy: api}
`)
	s := New(f, prometheus.NewRegistry(), slog.New(slog.DiscardHandler), 1<<10, Options{})
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{{
		Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "api_key", Value: "k"}}}}}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := s.Decide(t.Context(), req)
		if err != nil || resp.OverallCode != want || resp.Statuses[0].CurrentLimit.GetName() != "api" {
			t.Fatalf("call %d: %v %v, want %v", i, resp, err, want)
		}
	}
	if len(f.refused) != 1 || f.refused[0] != "api "+sluice.Identity("edge", "api_key", "k") {
		t.Errorf("refusals told: %q", f.refused)
	}
	mux := http.NewServeMux()
	s.Routes(func(pattern, _ string, h http.HandlerFunc) { mux.HandleFunc(pattern, h) })
	get := func(path string) int {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		return w.Code
	}
	if c := get("/healthcheck"); c != 200 {
		t.Errorf("/healthcheck %d with a configuration", c)
	}

	f.st = nil
	if _, err := s.Decide(t.Context(), req); status.Code(err) != codes.Unavailable {
		t.Errorf("without a configuration: %v, want UNAVAILABLE", err)
	}
	if c := get("/healthcheck"); c != 500 {
		t.Errorf("/healthcheck %d without a configuration, want 500", c)
	}
	if c := get("/rlconfig"); c != 500 {
		t.Errorf("/rlconfig %d without a configuration, want 500", c)
	}
}
