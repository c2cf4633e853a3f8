package server

import (
	"strings"
	"testing"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/envoy"
)

// grantsYAML has a policy with grants that refills once an hour, whose
// grants last an hour: units a process holds stay held for the test.
const grantsYAML = `
policies:
  - {name: hot, algorithm: gcra, burst: 50, rate: 1/h, grants: auto, grant_life: 1h, grant_period: 30m}
  - {name: plain, algorithm: gcra, burst: 50, rate: 1/h}
domains:
  - domain: edge
    counting: each
    descriptors:
      - {key: hot, policy: hot}
      - {key: plain, policy: plain}
`

// checks sends n /v1/check requests of policy on key and counts those
// allowed.
func checks(t *testing.T, url, policy, key string, n int) int {
	t.Helper()
	allowed := 0
	for range n {
		r := do(t, "POST", url+"/v1/check", `{"policy":"`+policy+`","key":"`+key+`"}`)
		if r.code != 200 && r.code != 429 {
			t.Fatalf("check: %d %s", r.code, r.raw)
		}
		if r.body["allowed"] == true {
			allowed++
		}
	}
	return allowed
}

// TestGrantsCheck: /v1/check of a policy with grants decides against the
// process's grant (most decisions local), admits exactly the burst; the
// multi form and reservations refuse the policy with a reason (400).
func TestGrantsCheck(t *testing.T) {
	s, ts := newTestServer(t, grantsYAML)
	// remaining is the units of this process's grant: the first grant is
	// of one unit (demand so far), not the key's 49.
	if r := do(t, "POST", ts.URL+"/v1/check", `{"policy":"hot","key":"first"}`); r.body["remaining"] != 0.0 || r.header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("first check: %d %s %v", r.code, r.raw, r.header)
	}
	if got := checks(t, ts.URL, "hot", "k", 80); got != 50 {
		t.Fatalf("allowed %d of 80, want the burst, 50", got)
	}
	st := s.state.Load().policies["hot"].limiter.GrantStats()
	if st.Local < 40 || st.Calls == 0 || st.Calls > 40 {
		t.Fatalf("grant stats %+v: want most decisions local", st)
	}
	if st := s.state.Load().policies["plain"].limiter.GrantStats(); st != (s.state.Load().policies["plain"].limiter.GrantStats()) || st.Calls != 0 {
		t.Fatalf("plain: %+v", st)
	}
	r := do(t, "POST", ts.URL+"/v1/check", `{"checks":[{"policy":"plain","key":"k"},{"policy":"hot","key":"k"}]}`)
	if r.code != 400 || !strings.Contains(r.raw, `checks[1].policy \"hot\" has grants`) {
		t.Fatalf("multi form: %d %s", r.code, r.raw)
	}
	r = do(t, "POST", ts.URL+"/v1/reservations/reserve", `{"policy":"hot","key":"k","estimate":1}`)
	if r.code != 400 || !strings.Contains(r.raw, `policy \"hot\" has grants`) {
		t.Fatalf("reserve: %d %s", r.code, r.raw)
	}
}

// TestGrantsEnvoy: the Envoy gRPC and HTTP paths decide a descriptor of a
// policy with grants against the grant, beside one without, in one call:
// the burst exactly, most decisions local.
func TestGrantsEnvoy(t *testing.T) {
	s, c, _ := startEnvoy(t, grantsYAML, envoy.Options{})
	hot, plain := 0, 0
	for range 70 {
		r, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "edge",
			Descriptors: []*commonrl.RateLimitDescriptor{desc("hot", "a"), desc("plain", "a")}})
		if err != nil {
			t.Fatal(err)
		}
		if r.Statuses[0].Code == rlsv3.RateLimitResponse_OK {
			hot++
		}
		if r.Statuses[1].Code == rlsv3.RateLimitResponse_OK {
			plain++
		}
	}
	if hot != 50 || plain != 50 {
		t.Fatalf("allowed hot %d, plain %d of 70, want 50 each", hot, plain)
	}
	if st := s.state.Load().policies["hot"].limiter.GrantStats(); st.Local < 30 {
		t.Fatalf("grant stats %+v: want most decisions local", st)
	}
	_, ts := newTestServer(t, grantsYAML)
	ok := 0
	for range 60 {
		r := do(t, "POST", ts.URL+"/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"hot","value":"b"}]}]}`)
		if r.code == 200 {
			ok++
		} else if r.code != 429 {
			t.Fatalf("POST /json: %d %s", r.code, r.raw)
		}
	}
	if ok != 50 {
		t.Fatalf("POST /json allowed %d of 60, want 50", ok)
	}
}

// TestGrantsReloadGivesBack: a reload replaces a policy's limiters; the
// old ones give back the units they hold (Limiter.Close), so the new ones
// admit all that was not spent at once, not after the grants' hour.
func TestGrantsReloadGivesBack(t *testing.T) {
	s, ts := newTestServer(t, grantsYAML)
	spent := checks(t, ts.URL, "hot", "k", 20)
	old := s.state.Load().policies["hot"].limiter
	st := old.GrantStats()
	if held := st.Granted - st.Returned - st.Expired - st.Local - st.Store; held <= 0 {
		t.Fatalf("the limiter holds no units before the reload (%+v): the test would prove nothing", st)
	}
	cfg, err := config.Parse("test.yaml", []byte(grantsYAML))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if s.state.Load().policies["hot"].limiter == old {
		t.Fatal("the reload kept the limiter")
	}
	if st := old.GrantStats(); st.Returned == 0 {
		t.Fatalf("the old limiter gave nothing back: %+v", st)
	}
	if got := checks(t, ts.URL, "hot", "k", 60); got != 50-spent {
		t.Fatalf("after the reload: allowed %d, want the %d not spent", got, 50-spent)
	}
}

// TestGrantsOpenAPI: the answers about a policy with grants are those the
// API reference describes: GET /v1/policies (grants, on_failure: share),
// the single check, and the multi form's 400.
func TestGrantsOpenAPI(t *testing.T) {
	api := newAPISchemas(t)
	_, ts := newTestServer(t, "policies:\n  - {name: hot, algorithm: gcra, burst: 50, rate: 1/s, grants: auto, on_failure: share}\n")
	resp, body := send(t, "GET", ts.URL+"/v1/policies", "", nil)
	api.check(t, "GET", "/v1/policies", resp, body)
	if !strings.Contains(string(body), `"on_failure":"share"`) || !strings.Contains(string(body), `"grants":true`) {
		t.Fatalf("GET /v1/policies: %s", body)
	}
	resp, body = send(t, "POST", ts.URL+"/v1/check", `{"policy":"hot","key":"k"}`, nil)
	api.check(t, "POST", "/v1/check", resp, body)
	resp, body = send(t, "POST", ts.URL+"/v1/check", `{"checks":[{"policy":"hot","key":"k"}]}`, nil)
	if resp.StatusCode != 400 {
		t.Fatalf("multi form: %d %s", resp.StatusCode, body)
	}
	api.check(t, "POST", "/v1/check", resp, body)
	// The dashboard's state carries the policy's grant counters.
	resp, body = send(t, "GET", ts.URL+"/ui/state.json", "", nil)
	api.check(t, "GET", "/ui/state.json", resp, body)
	if !strings.Contains(string(body), `"grants":[{"name":"hot","limiter":"hot.gcra","local":0,"valkey":1,"failed":0,"calls":`) {
		t.Fatalf("GET /ui/state.json: %s", body)
	}
}

// TestGrantsMetrics: the grant metrics are read from Limiter.GrantStats at
// scrape time, per limiter, and never go back across a reload.
func TestGrantsMetrics(t *testing.T) {
	s, ts := newTestServer(t, grantsYAML)
	checks(t, ts.URL, "hot", "k", 20)
	g := s.state.Load().policies["hot"].limiter.GrantStats()
	reg := s.Registry()
	for _, c := range []struct {
		name   string
		labels []string
		want   int64
	}{
		{"sluice_grant_calls_total", nil, g.Calls},
		{"sluice_grants_total", []string{"event", "taken"}, g.Taken},
		{"sluice_grants_total", []string{"event", "renewed"}, g.Renewed},
		{"sluice_grant_units_total", []string{"event", "granted"}, g.Granted},
		{"sluice_grant_decisions_total", []string{"where", "local"}, g.Local},
		{"sluice_grant_decisions_total", []string{"where", "valkey"}, g.Store},
		{"sluice_grant_keys", nil, 1},
	} {
		if got := metricValue(t, reg, c.name, append([]string{"limiter", "hot.gcra"}, c.labels...)...); got != float64(c.want) {
			t.Errorf("%s %v = %v, want %d", c.name, c.labels, got, c.want)
		}
	}
	if g.Local+g.Store != 20 || g.Local < 12 {
		t.Fatalf("decisions %+v", g)
	}
	cfg, err := config.Parse("test.yaml", []byte(grantsYAML))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	checks(t, ts.URL, "hot", "k", 5)
	if got := metricValue(t, reg, "sluice_grant_decisions_total", "limiter", "hot.gcra", "where", "local") +
		metricValue(t, reg, "sluice_grant_decisions_total", "limiter", "hot.gcra", "where", "valkey"); got != 25 {
		t.Errorf("decisions after the reload: %v, want 25 (counted across it)", got)
	}
	if got := metricValue(t, reg, "sluice_grant_units_total", "limiter", "hot.gcra", "event", "returned"); got == 0 {
		t.Error("no units returned by the reload")
	}
}

// TestGrantsCloseGivesBack: Server.Close (sluice serve's shutdown) gives
// back the units the served limiters hold.
func TestGrantsCloseGivesBack(t *testing.T) {
	s, ts := newTestServer(t, grantsYAML)
	spent := checks(t, ts.URL, "hot", "k", 20)
	lim := s.state.Load().policies["hot"].limiter
	s.Close()
	st := lim.GrantStats()
	if st.Returned == 0 || st.Granted-st.Returned-st.Expired != int64(spent) {
		t.Fatalf("after Close: %+v, %d spent: want every unspent unit returned", st, spent)
	}
}

// TestGrantsEnvoyStopIncrement: under STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
// a descriptor of a policy with grants is not read ahead (its own decision
// refuses it), and a call with it beside another decides: the burst of
// each, exactly.
func TestGrantsEnvoyStopIncrement(t *testing.T) {
	_, c, _ := startEnvoy(t, grantsYAML, envoy.Options{StopIncrementWhenOverLimit: true})
	hot, plain := 0, 0
	for range 60 {
		r, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "edge",
			Descriptors: []*commonrl.RateLimitDescriptor{desc("hot", "a"), desc("plain", "a")}})
		if err != nil {
			t.Fatal(err)
		}
		if r.Statuses[0].Code == rlsv3.RateLimitResponse_OK {
			hot++
		}
		if r.Statuses[1].Code == rlsv3.RateLimitResponse_OK {
			plain++
		}
	}
	if hot != 50 || plain != 50 {
		t.Fatalf("allowed hot %d, plain %d of 60, want 50 each", hot, plain)
	}
}

// TestGrantsAdminKeys: the admin peek of a key of a policy with grants is
// a 400 pointing to sluice inspect (a peek would take a grant, and this
// instance knows only its own); the admin reset resets the grant state:
// the key gets its limit back, but for the units this instance holds.
func TestGrantsAdminKeys(t *testing.T) {
	api := newAPISchemas(t)
	s, ts := newTestServer(t, "admin:\n  token_env: SLUICE_TEST_TOKEN\n"+grantsYAML)
	auth := []string{"Authorization", "Bearer " + testToken}
	resp, body := send(t, "GET", ts.URL+"/v1/keys/hot/k", "", auth)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "sluice inspect hot KEY") {
		t.Fatalf("peek: %d %s", resp.StatusCode, body)
	}
	api.check(t, "GET", "/v1/keys/{policy}/{key}", resp, body)
	if st := s.state.Load().policies["hot"].limiter.GrantStats(); st.Calls != 0 {
		t.Fatalf("the refused peek made a grant call: %+v", st)
	}
	spent := checks(t, ts.URL, "hot", "k", 30)
	resp, body = send(t, "DELETE", ts.URL+"/v1/keys/hot/k", "", auth)
	if resp.StatusCode != 200 {
		t.Fatalf("reset: %d %s", resp.StatusCode, body)
	}
	if got := checks(t, ts.URL, "hot", "k", 80); got < 50-spent || got > 50 {
		t.Fatalf("after the reset: allowed %d, want from %d to 50", got, 50-spent)
	}
}
