package server

import (
	"context"
	"encoding/json"
	"math"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/memstore"
)

const leasesYAML = `
policies:
  - {name: exports, algorithm: in_flight, limit: 2, lease: 30s}
  - {name: closed, algorithm: in_flight, limit: 2, lease: 30s, on_failure: deny}
  - {name: api, algorithm: token_bucket, burst: 3, rate: 1/m}
`

func leaseCall(t *testing.T, url, route, body string) (int, map[string]any, string) {
	t.Helper()
	resp, b := send(t, "POST", url+"/v1/leases/"+route, body, nil)
	var m map[string]any
	json.Unmarshal(b, &m)
	return resp.StatusCode, m, resp.Header.Get("Retry-After")
}

// TestLeasesContract: the three lease routes answer as the API reference
// says: a lease with its limit, remaining and expiry, 429 with
// retry_after_ms and Retry-After when full, renew with the expiry or 410,
// release true then false; /v1/check on an in_flight policy and the
// lease routes on a rate policy are 400s with a reason.
func TestLeasesContract(t *testing.T) {
	_, ts := newTestServer(t, leasesYAML)
	u := ts.URL
	code, a, _ := leaseCall(t, u, "acquire", `{"policy":"exports","key":"tenant:42"}`)
	id, _ := a["lease"].(string)
	if code != 200 || a["allowed"] != true || a["limit"] != 2.0 || a["remaining"] != 1.0 || a["expires_in_ms"] != 30000.0 || len(id) != 23 {
		t.Fatalf("acquire: %d %v", code, a)
	}
	leaseCall(t, u, "acquire", `{"policy":"exports","key":"tenant:42"}`)
	code, r, ra := leaseCall(t, u, "acquire", `{"policy":"exports","key":"tenant:42"}`)
	// The earliest lease ends 30s after the first acquire, by the store's
	// clock, which may have moved on by a millisecond or more since.
	retry, _ := r["retry_after_ms"].(float64)
	if code != 429 || r["allowed"] != false || r["remaining"] != 0.0 || retry <= 25000 || retry > 30000 || ra != strconv.Itoa(int(math.Ceil(retry/1000))) || r["lease"] != nil {
		t.Fatalf("acquire when full: %d %v Retry-After %q", code, r, ra)
	}
	body := `{"policy":"exports","key":"tenant:42","lease":"` + id + `"}`
	if code, m, _ := leaseCall(t, u, "renew", body); code != 200 || m["expires_in_ms"] != 30000.0 {
		t.Fatalf("renew: %d %v", code, m)
	}
	if code, m, _ := leaseCall(t, u, "release", body); code != 200 || m["released"] != true {
		t.Fatalf("release: %d %v", code, m)
	}
	if code, m, _ := leaseCall(t, u, "release", body); code != 200 || m["released"] != false {
		t.Fatalf("second release: %d %v", code, m)
	}
	if code, m, _ := leaseCall(t, u, "renew", body); code != 410 || !strings.Contains(m["detail"].(string), "had ended") {
		t.Fatalf("renew of a released lease: %d %v", code, m)
	}
	// Another key's lease releases nothing there.
	code, b, _ := leaseCall(t, u, "acquire", `{"policy":"exports","key":"other"}`)
	other := b["lease"].(string)
	if code, m, _ := leaseCall(t, u, "release", `{"policy":"exports","key":"tenant:42","lease":"`+other+`"}`); code != 200 || m["released"] != false {
		t.Fatalf("release of another key's lease: %d %v", code, m)
	}
	for _, c := range []struct{ route, body, want string }{
		{"acquire", `{"policy":"api","key":"k"}`, `policy "api" is token_bucket, not in_flight`},
		{"renew", `{"policy":"exports","key":"k","lease":"h123"}`, "lease id"},
		{"release", `{"policy":"exports","key":"k","lease":"` + strings.Repeat("\u00e9", 12) + `"}`, "lease id"},
		{"release", `{"policy":"exports","key":"","lease":"x"}`, "key is missing"},
		{"renew", `{"policy":"exports","key":"k"}`, "lease is missing"},
		{"acquire", `{"policy":"exports","key":"k","cost":2}`, "unknown field"},
	} {
		code, m, _ := leaseCall(t, u, c.route, c.body)
		if d, _ := m["detail"].(string); code != 400 || !strings.Contains(d, c.want) {
			t.Errorf("%s %s: %d %v, want 400 saying %q", c.route, c.body, code, m, c.want)
		}
	}
	resp, raw := send(t, "POST", u+"/v1/check", `{"policy":"exports","key":"k"}`, nil)
	if resp.StatusCode != 400 || !strings.Contains(string(raw), "POST /v1/leases/acquire") {
		t.Fatalf("/v1/check on an in_flight policy: %d %s", resp.StatusCode, raw)
	}
	resp, raw = send(t, "POST", u+"/v1/reservations/reserve", `{"policy":"exports","key":"k","estimate":1}`, nil)
	if resp.StatusCode != 400 || !strings.Contains(string(raw), "no estimate to settle; hold a lease instead") {
		t.Fatalf("/v1/reservations/reserve on an in_flight policy: %d %s", resp.StatusCode, raw)
	}
}

// TestLeasesDegraded: with the store down, on_failure allow gives a lease
// that renew and release accept without the store; deny refuses with 429.
func TestLeasesDegraded(t *testing.T) {
	cfg, err := config.Parse("down.yaml", []byte(leasesYAML))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, Options{Store: pingDownStore{&downStore{}}, StoreName: "down", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	code, a, _ := leaseCall(t, ts.URL, "acquire", `{"policy":"exports","key":"k"}`)
	id, _ := a["lease"].(string)
	if code != 200 || a["degraded"] != true || !strings.HasPrefix(id, "o") {
		t.Fatalf("acquire, store down, allow: %d %v", code, a)
	}
	body := `{"policy":"exports","key":"k","lease":"` + id + `"}`
	if code, m, _ := leaseCall(t, ts.URL, "renew", body); code != 200 {
		t.Fatalf("renew of a degraded lease: %d %v", code, m)
	}
	if code, m, _ := leaseCall(t, ts.URL, "release", body); code != 200 || m["released"] != true {
		t.Fatalf("release of a degraded lease: %d %v", code, m)
	}
	if code, m, ra := leaseCall(t, ts.URL, "acquire", `{"policy":"closed","key":"k"}`); code != 429 || m["degraded"] != true || ra != "1" {
		t.Fatalf("acquire, store down, deny: %d %v %q", code, m, ra)
	}
	// A held lease's release with the store down: 503, never a 500.
	held := `{"policy":"exports","key":"k","lease":"h` + strings.Repeat("A", 21) + `Q"}`
	if code, m, _ := leaseCall(t, ts.URL, "release", held); code != 503 {
		t.Fatalf("release with the store down: %d %v", code, m)
	}
}

// TestLeasesMetrics: acquires and refusals are decisions; releases,
// releases of ended leases, renewals and lost renewals are
// sluice_lease_events_total.
func TestLeasesMetrics(t *testing.T) {
	_, ts := newTestServer(t, leasesYAML)
	u := ts.URL
	_, a, _ := leaseCall(t, u, "acquire", `{"policy":"exports","key":"m"}`)
	body := `{"policy":"exports","key":"m","lease":"` + a["lease"].(string) + `"}`
	leaseCall(t, u, "renew", body)
	leaseCall(t, u, "release", body)
	leaseCall(t, u, "release", body)
	leaseCall(t, u, "renew", body)
	_, raw := send(t, "GET", u+"/metrics", "", nil)
	for _, want := range []string{
		`sluice_decisions_total{limiter="exports.in_flight",outcome="allowed"} 1`,
		`sluice_lease_events_total{event="renewed",limiter="exports.in_flight"} 1`,
		`sluice_lease_events_total{event="released",limiter="exports.in_flight"} 1`,
		`sluice_lease_events_total{event="ended",limiter="exports.in_flight"} 1`,
		`sluice_lease_events_total{event="lost",limiter="exports.in_flight"} 1`,
	} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
}

// TestLeasesExpiredMetric: leases whose Lease passed without a release
// count as sluice_lease_events_total{event="expired"} when the store
// reaps them, at the next decision on their key (here an acquire); a
// released lease does not, nor the leases of a key that expired whole
// before its next use. Also with a tracing observer beside the
// metrics (Options.Observer a ContextObserver, as with OpenTelemetry).
func TestLeasesExpiredMetric(t *testing.T) {
	t.Run("metrics", func(t *testing.T) { testLeasesExpired(t, nil) })
	t.Run("with a tracing observer", func(t *testing.T) { testLeasesExpired(t, tracing{}) })
}

// tracing is a ContextObserver that does nothing.
type tracing struct{}

func (tracing) ObserveDecision(string, sluice.Result, error, time.Duration) {}
func (tracing) ObserveContext(context.Context, sluice.Observation)          {}

func testLeasesExpired(t *testing.T, extra sluice.Observer) {
	cfg, err := config.Parse("test.yaml", []byte(leasesYAML))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s, err := New(cfg, Options{Store: memstore.New(memstore.WithClock(clock)), StoreName: "memory", Logger: quietLogger(), Env: testEnv, Observer: extra})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	u := ts.URL
	leaseCall(t, u, "acquire", `{"policy":"exports","key":"x"}`) // its holder crashes
	_, b, _ := leaseCall(t, u, "acquire", `{"policy":"exports","key":"x"}`)
	leaseCall(t, u, "release", `{"policy":"exports","key":"x","lease":"`+b["lease"].(string)+`"}`)
	mu.Lock()
	now = now.Add(30*time.Second + 500*time.Millisecond) // the lease passed, its key (kept a second longer) not
	mu.Unlock()
	want := `sluice_lease_events_total{event="expired",limiter="exports.in_flight"} `
	if _, raw := send(t, "GET", u+"/metrics", "", nil); strings.Contains(string(raw), want+"1") {
		t.Fatalf("/metrics counts an expired lease before its key is used again")
	}
	if code, m, _ := leaseCall(t, u, "acquire", `{"policy":"exports","key":"x"}`); code != 200 {
		t.Fatalf("acquire after the lease passed: %d %v", code, m)
	}
	if _, raw := send(t, "GET", u+"/metrics", "", nil); !strings.Contains(string(raw), want+"1\n") {
		t.Errorf("/metrics has no %s1:\n%s", want, grepLines(string(raw), "sluice_lease_events_total"))
	}
	// A key nobody uses for longer than its latest lease plus a second
	// expires whole: its leases are not counted.
	leaseCall(t, u, "acquire", `{"policy":"exports","key":"y"}`)
	mu.Lock()
	now = now.Add(32 * time.Second)
	mu.Unlock()
	leaseCall(t, u, "acquire", `{"policy":"exports","key":"y"}`)
	if _, raw := send(t, "GET", u+"/metrics", "", nil); !strings.Contains(string(raw), want+"1\n") {
		t.Errorf("a key that expired whole counted its leases:\n%s", grepLines(string(raw), "sluice_lease_events_total"))
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
