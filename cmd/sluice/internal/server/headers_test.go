package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/httplimit/sfvtest"
	"github.com/sluicehq/sluice/memstore"
)

const headersYAML = `
policies:
  - {name: api, algorithm: token_bucket, burst: 3, rate: 1/m}
  - {name: one, algorithm: fixed_window, limit: 1, window: 1h}
  - {name: dark, algorithm: gcra, burst: 1, rate: 1/h, shadow: true}
  - {name: open, algorithm: fixed_window, limit: 5, window: 1m, on_failure: allow}
  - {name: closed, algorithm: fixed_window, limit: 5, window: 1m, on_failure: deny}
`

// checkHeaders parses the headers of a /v1/check answer, those on the HTTP
// response and those in its JSON, with the independent parser, and
// requires both to be the same.
func checkHeaders(t *testing.T, r response) sfvtest.Headers {
	t.Helper()
	fromJSON := http.Header{}
	if m, ok := r.body["headers"].(map[string]any); ok {
		for k, v := range m {
			fromJSON[k] = []string{v.(string)}
		}
	}
	onWire, err := sfvtest.CheckHeaders(r.header)
	if err != nil {
		t.Fatalf("HTTP headers %v: %v", r.header, err)
	}
	inJSON, err := sfvtest.CheckHeaders(fromJSON)
	if err != nil {
		t.Fatalf("JSON headers %v: %v", fromJSON, err)
	}
	for name, v := range fromJSON {
		if got := r.header.Get(name); got != v[0] {
			t.Fatalf("%s is %q on the response and %q in the JSON", name, got, v[0])
		}
	}
	if render(onWire) != render(inJSON) {
		t.Fatalf("the response says %+v, its JSON %+v", render(onWire), render(inJSON))
	}
	return inJSON
}

// The service's headers follow the draft as the middleware's do (one
// writer): RateLimit's t is the time until more quota, not until the
// bucket is full, and Retry-After is never earlier.
func TestServiceHeaders(t *testing.T) {
	_, ts := newTestServer(t, headersYAML)
	url := ts.URL + "/v1/check"
	// 3 tokens, one a minute: the next one is 60s away, the bucket full
	// in 60, 120, 180s.
	for i, w := range []hdrs{
		{`api 3/180`, `api 2/60`, `3 2 60`, ``},
		{`api 3/180`, `api 1/60`, `3 1 120`, ``},
		{`api 3/180`, `api 0/60`, `3 0 180`, ``},
		{`api 3/180`, `api 0/60`, `3 0 180`, `60`},
	} {
		h := checkHeaders(t, do(t, "POST", url, `{"policy":"api","key":"k"}`))
		if got := render(h); got != w {
			t.Errorf("check %d: %+v, want %+v", i, got, w)
		}
	}
}

// hdrs renders parsed headers: RateLimit-Policy items as "name q/w",
// RateLimit items as "name r/t" ("-" without t), X-RateLimit-* as
// "limit remaining reset", and Retry-After.
type hdrs struct{ policy, ratelimit, x, retryAfter string }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func render(h sfvtest.Headers) (w hdrs) {
	var p, l []string
	for _, x := range h.Policies {
		p = append(p, x.Name+" "+itoa(x.Q)+"/"+itoa(x.W))
	}
	for _, x := range h.Limits {
		t := "-"
		if x.HasT {
			t = itoa(x.T)
		}
		l = append(l, x.Name+" "+itoa(x.R)+"/"+t)
	}
	w.policy, w.ratelimit = strings.Join(p, ","), strings.Join(l, ",")
	if h.HasX {
		w.x = itoa(h.XLimit) + " " + itoa(h.XRemaining) + " " + itoa(h.XReset)
	}
	if h.HasRetryAfter {
		w.retryAfter = itoa(h.RetryAfter)
	}
	return w
}

// Shadow policies and degraded decisions are never advertised: a shadow
// policy has no headers at all, before and after it would refuse; a
// degraded one keeps only its RateLimit-Policy (fail open), and a refusal
// by a store failure only gets Retry-After (fail closed).
func TestServiceHidesShadowAndDegraded(t *testing.T) {
	_, ts := newTestServer(t, headersYAML)
	for i := range 3 {
		r := do(t, "POST", ts.URL+"/v1/check", `{"policy":"dark","key":"k"}`)
		if h := checkHeaders(t, r); r.body["allowed"] != true || render(h) != (hdrs{}) {
			t.Fatalf("shadow check %d: %s %v", i, r.raw, r.header)
		}
	}

	cfg, err := config.Parse("test.yaml", []byte(headersYAML))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, Options{Store: failing{}, StoreName: "failing", Logger: quietLogger(), Env: testEnv})
	if err != nil {
		t.Fatal(err)
	}
	down := httptest.NewServer(s.Handler())
	defer down.Close()
	for _, c := range []struct {
		policy  string
		allowed bool
		want    hdrs
	}{
		{"open", true, hdrs{policy: "open 5/60"}},
		{"closed", false, hdrs{policy: "closed 5/60", retryAfter: "1"}},
	} {
		r := do(t, "POST", down.URL+"/v1/check", `{"policy":"`+c.policy+`","key":"k"}`)
		h := checkHeaders(t, r)
		if r.body["allowed"] != c.allowed || r.body["degraded"] != true || render(h) != c.want {
			t.Errorf("%s, store down: %s, headers %+v, want %+v", c.policy, r.raw, render(h), c.want)
		}
	}
}

// On a refused multi-check, the allowing policy's headers show what it has
// once its unit is back.
func TestServiceHeadersAfterRefund(t *testing.T) {
	_, ts := newTestServer(t, headersYAML)
	body := `{"checks":[{"policy":"api","key":"m"},{"policy":"one","key":"m"}]}`
	do(t, "POST", ts.URL+"/v1/check", body)
	r := do(t, "POST", ts.URL+"/v1/check", body)
	if r.body["allowed"] != false {
		t.Fatalf("second multi-check: %s", r.raw)
	}
	results := r.body["results"].([]any)
	api := http.Header{}
	for k, v := range results[0].(map[string]any)["headers"].(map[string]any) {
		api[k] = []string{v.(string)}
	}
	h, err := sfvtest.CheckHeaders(api)
	if err != nil {
		t.Fatal(err)
	}
	if got := render(h); got != (hdrs{policy: "api 3/180", ratelimit: "api 2/60", x: "3 2 60"}) {
		t.Errorf("api after the refund: %+v", got)
	}
}

// failing is a store that is always unavailable.
type failing struct{}

func (failing) Do(ctx context.Context, batch []driver.Op) error {
	for i := range batch {
		batch[i].Err = errors.New("connection refused")
	}
	return nil
}

func (failing) Delete(context.Context, ...string) error { return errors.New("connection refused") }

// The answer docs/serve.md shows for its first curl is what the service
// answers on the default configuration: fields and headers alike.
func TestServeDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../../../docs/serve.md")
	if err != nil {
		t.Fatal(err)
	}
	const curl = `curl -s localhost:8080/v1/check -d '{"policy":"api","key":"key_abc","cost":1}'`
	_, after, ok := strings.Cut(string(doc), curl+"\n")
	if !ok {
		t.Fatalf("docs/serve.md lacks %s", curl)
	}
	answer, _, _ := strings.Cut(after, "\n\n")
	var want map[string]any
	if err := json.Unmarshal([]byte(answer), &want); err != nil {
		t.Fatalf("the documented answer %q: %v", answer, err)
	}
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, Options{Store: memstore.New(), StoreName: "memory", Logger: quietLogger(), Env: testEnv})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	r := do(t, "POST", ts.URL+"/v1/check", `{"policy":"api","key":"key_abc","cost":1}`)
	checkHeaders(t, r)
	if !reflect.DeepEqual(r.body, want) {
		t.Errorf("docs/serve.md shows\n%v\nthe service answers\n%v", want, r.body)
	}
}

// Forward auth's answers carry the same headers, from the same writer:
// every one parses, and a refusal's Retry-After is never before t.
func TestForwardAuthHeaders(t *testing.T) {
	s := fwdServer(t, fwdYAML, nil)
	for i, want := range []hdrs{
		{policy: "api 3/10800", ratelimit: "api 2/3600", x: "3 2 3600"},
		{policy: "api 3/10800", ratelimit: "api 1/3600", x: "3 1 7200"},
		{policy: "api 3/10800", ratelimit: "api 0/3600", x: "3 0 10800"},
		{policy: "api 3/10800", ratelimit: "api 0/3600", x: "3 0 10800", retryAfter: "3600"},
	} {
		w := fwd(s, "GET", "api.example.com", "/v1/items", "192.0.2.1", "X-API-Key", "k")
		h, err := sfvtest.CheckHeaders(w.Header())
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if got := render(h); got != want {
			t.Errorf("request %d: %d %+v, want %+v", i, w.Code, got, want)
		}
	}
}
