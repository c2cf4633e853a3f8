package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/memstore"
	"go.yaml.in/yaml/v3"
)

// The tests of openapi.yaml: it is docs/openapi.yaml, its paths and methods
// are the route table's, its bounds are the code's, the real responses of
// every route validate against it, and Redocly CLI lints it clean.

const docsOpenAPI = "../../../../docs/openapi.yaml"

// openAPIMethods are the operations a path item may hold (OpenAPI 3.1): a
// route answering any method is documented under each.
var openAPIMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

func loadOpenAPI(t *testing.T) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(openAPI, &doc); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	return doc
}

// TestOpenAPICopy: docs/openapi.yaml is the embedded document, byte for
// byte.
func TestOpenAPICopy(t *testing.T) {
	b, err := os.ReadFile(docsOpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, openAPI) {
		t.Fatalf("docs/openapi.yaml differs from cmd/sluice/internal/server/openapi.yaml (the source): " +
			"edit the latter and run go generate ./internal/server in cmd/sluice")
	}
}

// docPath is the OpenAPI path of a mux pattern's path: {name...} is
// {name}.
func docPath(muxPath string) string {
	return strings.ReplaceAll(muxPath, "...}", "}")
}

// TestOpenAPIRoutes: the document's paths and methods are the route
// table's, no more, no fewer.
func TestOpenAPIRoutes(t *testing.T) {
	s, _ := newTestServer(t, testYAML)
	var table []string
	for _, r := range s.routes() {
		if r.method == "" {
			for _, m := range openAPIMethods {
				table = append(table, strings.ToUpper(m)+" "+docPath(r.path))
			}
			continue
		}
		table = append(table, r.method+" "+docPath(r.path))
	}
	var documented []string
	for path, item := range loadOpenAPI(t)["paths"].(map[string]any) {
		for m := range item.(map[string]any) {
			if slices.Contains(openAPIMethods, m) {
				documented = append(documented, strings.ToUpper(m)+" "+path)
			}
		}
	}
	sort.Strings(table)
	sort.Strings(documented)
	for _, r := range table {
		if !slices.Contains(documented, r) {
			t.Errorf("%s is routed but not in openapi.yaml", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(table, d) {
			t.Errorf("%s is in openapi.yaml but not in the route table (routes.go)", d)
		}
	}
	if len(table) != len(documented) {
		t.Errorf("%d routes, %d documented operations", len(table), len(documented))
	}
}

// at returns the value at a JSON pointer of doc.
func at(t *testing.T, doc any, ptr string) any {
	t.Helper()
	v := doc
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			v = x[tok]
		case []any:
			i, _ := strconv.Atoi(tok)
			v = x[i]
		default:
			t.Fatalf("openapi.yaml: nothing at %s", ptr)
		}
	}
	if v == nil {
		t.Fatalf("openapi.yaml: nothing at %s", ptr)
	}
	return v
}

func number(t *testing.T, doc any, ptr string) int64 {
	t.Helper()
	switch n := at(t, doc, ptr).(type) {
	case int:
		return int64(n)
	case float64:
		return int64(n)
	}
	t.Fatalf("openapi.yaml: %s is not a number", ptr)
	return 0
}

// TestOpenAPIBounds: the document's bounds are the code's constants.
func TestOpenAPIBounds(t *testing.T) {
	doc := loadOpenAPI(t)
	for _, c := range []struct {
		ptr  string
		want int64
	}{
		{"/components/schemas/CheckItem/properties/key/maxLength", MaxKeyLen},
		{"/components/parameters/Key/schema/maxLength", MaxKeyLen},
		{"/components/schemas/LeaseAcquireRequest/properties/key/maxLength", MaxKeyLen},
		{"/components/schemas/LeaseRequest/properties/key/maxLength", MaxKeyLen},
		{"/components/schemas/CheckRequest/oneOf/1/properties/checks/maxItems", MaxChecks},
		{"/components/schemas/MultiResult/properties/results/maxItems", MaxChecks},
		{"/paths/~1v1~1top-refused/get/parameters/2/schema/maximum", maxTopRefused},
		{"/components/schemas/TopRefused/properties/keys/maxItems", maxTopRefused},
		{"/components/schemas/OverrideRequest/properties/reason/maxLength", MaxOverrideReason},
		{"/components/schemas/OverrideRequest/properties/actor/maxLength", MaxOverrideActor},
	} {
		if got := number(t, doc, c.ptr); got != c.want {
			t.Errorf("openapi.yaml %s = %d, the code says %d", c.ptr, got, c.want)
		}
	}
	for _, c := range []struct {
		ptr, want string
	}{
		{"/info/description", fmt.Sprintf("more than %d bytes", MaxHeaderBytes)},
		{"/components/responses/HeaderTooLarge/description", fmt.Sprintf("more than %d bytes", MaxHeaderBytes)},
		{"/components/responses/PayloadTooLarge/description", fmt.Sprintf("more than %d bytes", DefaultMaxBodyBytes)},
		{"/components/parameters/Key/description", fmt.Sprintf("1 to %d bytes", MaxKeyLen)},
		{"/paths/~1v1~1check/post/description", fmt.Sprintf("up to %d", MaxChecks)},
	} {
		if s, _ := at(t, doc, c.ptr).(string); !strings.Contains(s, c.want) {
			t.Errorf("openapi.yaml %s does not say %q:\n%s", c.ptr, c.want, s)
		}
	}
}

// TestOpenAPILint: Redocly CLI (scripts/install-redocly.sh) finds no
// error or warning in docs/openapi.yaml with its recommended rules.
func TestOpenAPILint(t *testing.T) {
	bin, err := exec.LookPath("redocly")
	if err != nil {
		t.Fatal("redocly is not installed: run bash scripts/install-redocly.sh (npm install --global @redocly/cli)")
	}
	cmd := exec.Command(bin, "lint", "--format=json", filepath.Base(docsOpenAPI))
	cmd.Dir = filepath.Dir(docsOpenAPI)
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var report struct {
		Totals   struct{ Errors, Warnings int }
		Problems []struct {
			RuleID  string `json:"ruleId"`
			Message string
		}
	}
	if jerr := json.Unmarshal(out, &report); jerr != nil {
		t.Fatalf("redocly lint docs/openapi.yaml: %v (%v)\n%s%s", err, jerr, out, stderr.Bytes())
	}
	if report.Totals.Errors+report.Totals.Warnings > 0 || err != nil {
		t.Fatalf("redocly lint docs/openapi.yaml: %d errors, %d warnings (%v): %+v\n%s",
			report.Totals.Errors, report.Totals.Warnings, err, report.Problems, stderr.Bytes())
	}
}

// apiSchemas validates bodies against the schemas of openapi.yaml.
type apiSchemas struct {
	doc   map[string]any
	c     *jsonschema.Compiler
	cache map[string]*jsonschema.Schema
}

func newAPISchemas(t *testing.T) *apiSchemas {
	t.Helper()
	doc := loadOpenAPI(t)
	// The document as JSON values (yaml.v3 gives ints; the validator
	// wants what encoding/json gives).
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource("openapi.json", v); err != nil {
		t.Fatal(err)
	}
	return &apiSchemas{doc: doc, c: c, cache: map[string]*jsonschema.Schema{}}
}

func pointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// response returns the pointer of the documented response of an
// operation for status, $ref followed; "" when the status is not
// documented.
func (a *apiSchemas) response(t *testing.T, method, path string, status int) string {
	t.Helper()
	ptr := "/paths/" + pointerEscape(path) + "/" + strings.ToLower(method) + "/responses/" + strconv.Itoa(status)
	op, ok := at(t, a.doc, "/paths/"+pointerEscape(path)+"/"+strings.ToLower(method)+"/responses").(map[string]any)
	if !ok {
		t.Fatalf("openapi.yaml: no operation %s %s", method, path)
	}
	r, ok := op[strconv.Itoa(status)].(map[string]any)
	if !ok {
		return ""
	}
	if ref, ok := r["$ref"].(string); ok {
		return strings.TrimPrefix(ref, "#")
	}
	return ptr
}

// check validates a real response: its status is documented for the
// operation, its media type is one the response lists (none: no body),
// and a JSON body validates against that media type's schema.
func (a *apiSchemas) check(t *testing.T, method, path string, resp *http.Response, body []byte) {
	t.Helper()
	where := fmt.Sprintf("%s %s -> %d", method, path, resp.StatusCode)
	ptr := a.response(t, method, path, resp.StatusCode)
	if ptr == "" {
		t.Errorf("%s: status not documented in openapi.yaml\n%s", where, body)
		return
	}
	a.checkBody(t, where, ptr, method, resp, body)
}

func (a *apiSchemas) checkBody(t *testing.T, where, ptr, method string, resp *http.Response, body []byte) {
	t.Helper()
	r := at(t, a.doc, ptr).(map[string]any)
	documented, _ := r["headers"].(map[string]any)
	for _, h := range describedHeaders {
		if len(resp.Header.Values(h)) == 0 {
			continue
		}
		hd, _ := documented[h].(map[string]any)
		if hd == nil {
			t.Errorf("%s: header %s is sent but not documented for this response (%s)", where, h, ptr)
			continue
		}
		hptr := ptr + "/headers/" + pointerEscape(h)
		if ref, ok := hd["$ref"].(string); ok {
			hptr = strings.TrimPrefix(ref, "#")
		}
		var v any = resp.Header.Get(h)
		if n, err := strconv.ParseInt(resp.Header.Get(h), 10, 64); err == nil {
			v = n
		}
		if err := a.schema(t, hptr+"/schema").Validate(v); err != nil {
			t.Errorf("%s: header %s: %q does not match %s: %v", where, h, resp.Header.Get(h), hptr, err)
		}
	}
	content, _ := r["content"].(map[string]any)
	if content == nil {
		if len(body) != 0 {
			t.Errorf("%s: documented without a body, got %q", where, body)
		}
		return
	}
	if method == http.MethodHead {
		return // no body
	}
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil {
		t.Errorf("%s: Content-Type %q: %v", where, resp.Header.Get("Content-Type"), err)
		return
	}
	if content[mt] == nil {
		t.Errorf("%s: media type %s not documented (%s lists %v)", where, mt, ptr, keys(content))
		return
	}
	sptr := ptr + "/content/" + pointerEscape(mt) + "/schema"
	var inst any
	if strings.HasSuffix(mt, "json") {
		if inst, err = jsonschema.UnmarshalJSON(bytes.NewReader(body)); err != nil {
			t.Errorf("%s: body is not JSON: %v\n%s", where, err, body)
			return
		}
	} else {
		inst = string(body)
	}
	if err := a.schema(t, sptr).Validate(inst); err != nil {
		t.Errorf("%s: the body does not match %s: %v\n%s", where, sptr, err, body)
	}
}

// describedHeaders are the response headers the document describes where
// they are sent.
var describedHeaders = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
	"RateLimit-Policy", "RateLimit", "Retry-After", "WWW-Authenticate"}

// request validates a request body against the operation's documented
// request schema (application/json).
func (a *apiSchemas) request(t *testing.T, method, path, body string) error {
	t.Helper()
	sptr := "/paths/" + pointerEscape(path) + "/" + strings.ToLower(method) + "/requestBody/content/application~1json/schema"
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(body))
	if err != nil {
		return err
	}
	return a.schema(t, sptr).Validate(inst)
}

// schema compiles the schema at a pointer of the document.
func (a *apiSchemas) schema(t *testing.T, ptr string) *jsonschema.Schema {
	t.Helper()
	if sch := a.cache[ptr]; sch != nil {
		return sch
	}
	at(t, a.doc, ptr)
	sch, err := a.c.Compile("openapi.json#" + ptr)
	if err != nil {
		t.Fatalf("openapi.yaml %s: %v", ptr, err)
	}
	a.cache[ptr] = sch
	return sch
}

func keys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

const openAPIYAML = `
admin:
  token_env: SLUICE_TEST_TOKEN
policies:
  - {name: api, algorithm: token_bucket, burst: 3, rate: 1/m, on_failure: allow, plans: {pro: {burst: 5}}}
  - {name: login, algorithm: sliding_log, limit: 1, window: 15m, on_failure: deny, headers: [retry-after], show_keys: raw}
  - {name: quota, algorithm: fixed_window, limit: 3, window: 1h, overrides: true}
  - {name: exports, algorithm: in_flight, limit: 2, lease: 30s}
forward_auth:
  trusted_proxies: [127.0.0.0/8]
  routes:
    - {name: login, path_prefix: /login, limits: [{policy: login, key: client_ip}]}
`

const openAPIEnvoyYAML = "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: hour, requests_per_unit: 1}}\n"

// apiCase is one request of TestOpenAPIResponses.
type apiCase struct {
	method, url, path string // path: the document's path of url
	body              string
	hdr               []string
	code              int
}

// TestOpenAPIResponses: real responses of every route, successes and
// errors, match the document: their status is documented for the
// operation and their body validates against its schema. Every operation
// of the document is exercised.
func TestOpenAPIResponses(t *testing.T) {
	a := newAPISchemas(t)
	_, ts := newTestServer(t, openAPIYAML)
	ecfg, err := config.Parse("envoy.yaml", []byte(openAPIEnvoyYAML))
	if err != nil {
		t.Fatal(err)
	}
	es, err := New(ecfg, Options{Store: memstore.New(), StoreName: "memory", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ets := httptest.NewServer(es.Handler())
	t.Cleanup(ets.Close)
	// A server whose store fails: degraded decisions, and 503 where no
	// policy can fall back.
	dcfg, err := config.Parse("down.yaml", []byte(testYAML))
	if err != nil {
		t.Fatal(err)
	}
	ds, err := New(dcfg, Options{Store: pingDownStore{&downStore{}}, StoreName: "down", Logger: quietLogger(), Env: testEnv})
	if err != nil {
		t.Fatal(err)
	}
	dts := httptest.NewServer(ds.Handler())
	t.Cleanup(dts.Close)
	d := dts.URL

	auth := []string{"Authorization", "Bearer " + testToken}
	u := ts.URL
	sid, _ := do(t, "POST", u+"/v1/reservations/reserve", `{"policy":"api","key":"s1","estimate":1}`).body["reservation"].(string)
	long := strings.Repeat("k", MaxKeyLen+1)
	many := `{"checks":[` + strings.Repeat(`{"policy":"api","key":"m"},`, MaxChecks) + `{"policy":"api","key":"m"}]}`
	cases := []apiCase{
		{"POST", u + "/v1/check", "/v1/check", `{"policy":"api","key":"a"}`, nil, 200},
		{"POST", u + "/v1/check", "/v1/check", `{"policy":"api","key":"a","cost":2,"plan":"pro"}`, nil, 200},
		{"POST", u + "/v1/check", "/v1/check", `{"checks":[{"policy":"api","key":"b"},{"policy":"login","key":"b"}]}`, nil, 200},
		{"POST", u + "/v1/check", "/v1/check", `{"policy":"login","key":"locked"}`, nil, 200},
		{"POST", u + "/v1/check", "/v1/check", `{"policy":"login","key":"locked"}`, nil, 200}, // refused, still 200
		{"POST", u + "/v1/check", "/v1/check", `{"policy":"api",`, nil, 400},
		{"POST", u + "/v1/check", "/v1/check", `{"policy":"api","key":"` + long + `"}`, nil, 400},
		{"POST", u + "/v1/check", "/v1/check", many, nil, 400},
		{"POST", u + "/v1/check", "/v1/check", `{"policy":"api","key":"a","cost":-1}`, nil, 400},
		{"POST", u + "/v1/check", "/v1/check", `{"policy":"nope","key":"a"}`, nil, 404},
		{"POST", u + "/v1/check", "/v1/check", `{"policy":"api","key":"` + strings.Repeat("k", DefaultMaxBodyBytes) + `"}`, nil, 413},
		{"GET", u + "/v1/policies", "/v1/policies", "", nil, 200},
		{"POST", d + "/v1/check", "/v1/check", `{"policy":"login","key":"a"}`, nil, 200}, // degraded
		{"DELETE", d + "/v1/keys/login/a", "/v1/keys/{policy}/{key}", "", auth, 503},
		{"GET", d + "/readyz", "/readyz", "", nil, 503},
		{"GET", d + "/ui/state.json", "/ui/state.json", "", nil, 200},

		{"GET", u + "/v1/keys/login/locked", "/v1/keys/{policy}/{key}", "", auth, 200},
		{"GET", u + "/v1/keys/api/a?plan=pro", "/v1/keys/{policy}/{key}", "", auth, 200},
		{"GET", u + "/v1/keys/api/a?plan=nope", "/v1/keys/{policy}/{key}", "", auth, 400},
		{"GET", u + "/v1/keys/login/locked", "/v1/keys/{policy}/{key}", "", nil, 401},
		{"GET", u + "/v1/keys/nope/a", "/v1/keys/{policy}/{key}", "", auth, 404},
		{"GET", ets.URL + "/v1/keys/api/a", "/v1/keys/{policy}/{key}", "", auth, 404}, // admin off
		{"DELETE", u + "/v1/keys/login/locked", "/v1/keys/{policy}/{key}", "", auth, 200},
		{"DELETE", u + "/v1/keys/login/" + long, "/v1/keys/{policy}/{key}", "", auth, 400},
		{"DELETE", u + "/v1/keys/login/locked", "/v1/keys/{policy}/{key}", "", []string{"Authorization", "Bearer wrong"}, 401},
		{"DELETE", u + "/v1/keys/nope/a", "/v1/keys/{policy}/{key}", "", auth, 404},

		{"GET", u + "/v1/top-refused", "/v1/top-refused", "", auth, 200},
		{"GET", u + "/v1/top-refused?policy=login&span=1m&n=5", "/v1/top-refused", "", auth, 200},
		{"GET", u + "/v1/top-refused?n=101", "/v1/top-refused", "", auth, 400},
		{"GET", u + "/v1/top-refused", "/v1/top-refused", "", nil, 401},
		{"GET", u + "/v1/top-refused?policy=nope", "/v1/top-refused", "", auth, 404},

		{"PUT", u + "/v1/overrides/quota/a", "/v1/overrides/{policy}/{key}", `{"limit":10,"window":"2h","expires":"2099-01-01T00:00:00Z","reason":"r","actor":"me"}`, auth, 200},
		{"PUT", u + "/v1/overrides/quota/a", "/v1/overrides/{policy}/{key}", `{"limit":0,"expires":"2099-01-01T00:00:00Z"}`, auth, 400},
		{"PUT", u + "/v1/overrides/quota/a", "/v1/overrides/{policy}/{key}", `{"limit":1,"expires":"2099-01-01T00:00:00Z","actor":"` + strings.Repeat("a", MaxOverrideActor+1) + `"}`, auth, 400},
		{"PUT", u + "/v1/overrides/quota/a", "/v1/overrides/{policy}/{key}", `{"limit":1}`, nil, 401},
		{"PUT", u + "/v1/overrides/nope/a", "/v1/overrides/{policy}/{key}", `{"limit":1,"expires":"2099-01-01T00:00:00Z"}`, auth, 404},
		{"PUT", u + "/v1/overrides/api/a", "/v1/overrides/{policy}/{key}", `{"limit":1,"expires":"2099-01-01T00:00:00Z"}`, auth, 409},
		{"PUT", u + "/v1/overrides/quota/a", "/v1/overrides/{policy}/{key}", `{"reason":"` + strings.Repeat("r", DefaultMaxBodyBytes) + `"}`, auth, 413},
		{"GET", u + "/v1/overrides/quota/a", "/v1/overrides/{policy}/{key}", "", auth, 200},
		{"GET", u + "/v1/overrides/quota/" + long, "/v1/overrides/{policy}/{key}", "", auth, 400},
		{"GET", u + "/v1/overrides/quota/a", "/v1/overrides/{policy}/{key}", "", nil, 401},
		{"GET", u + "/v1/overrides/quota/none", "/v1/overrides/{policy}/{key}", "", auth, 404},
		{"GET", u + "/v1/overrides/api/a", "/v1/overrides/{policy}/{key}", "", auth, 409},
		{"GET", u + "/v1/overrides/quota", "/v1/overrides/{policy}", "", auth, 200},
		{"GET", u + "/v1/overrides/quota", "/v1/overrides/{policy}", "", nil, 401},
		{"GET", u + "/v1/overrides/nope", "/v1/overrides/{policy}", "", auth, 404},
		{"GET", u + "/v1/overrides/api", "/v1/overrides/{policy}", "", auth, 409},
		{"DELETE", u + "/v1/overrides/quota/a", "/v1/overrides/{policy}/{key}", "", auth, 200},
		{"DELETE", u + "/v1/overrides/quota/none", "/v1/overrides/{policy}/{key}", "", auth, 200},
		{"DELETE", u + "/v1/overrides/quota/" + long, "/v1/overrides/{policy}/{key}", "", auth, 400},
		{"DELETE", u + "/v1/overrides/quota/a", "/v1/overrides/{policy}/{key}", "", nil, 401},
		{"DELETE", u + "/v1/overrides/nope/a", "/v1/overrides/{policy}/{key}", "", auth, 404},
		{"DELETE", u + "/v1/overrides/api/a", "/v1/overrides/{policy}/{key}", "", auth, 409},

		{"POST", ets.URL + "/json", "/json", `{"domain":"d","descriptors":[{"entries":[{"key":"k"}]}]}`, nil, 200},
		{"POST", ets.URL + "/json", "/json", `{"domain":"d","descriptors":[{"entries":[{"key":"k"}]}]}`, nil, 429},
		{"POST", ets.URL + "/json", "/json", `{"domain":`, nil, 400},
		{"POST", ets.URL + "/json", "/json", `{"domain":"","descriptors":[{"entries":[{"key":"k"}]}]}`, nil, 400},
		{"GET", ets.URL + "/healthcheck", "/healthcheck", "", nil, 200},
		{"GET", ets.URL + "/rlconfig", "/rlconfig", "", nil, 200},

		{"GET", u + "/ui", "/ui", "", nil, 200},
		{"GET", u + "/ui/", "/ui/{file}", "", nil, 200},
		{"GET", u + "/ui/app.js", "/ui/{file}", "", nil, 200},
		{"GET", u + "/ui/style.css", "/ui/{file}", "", nil, 200},
		{"GET", u + "/ui/nope.js", "/ui/{file}", "", nil, 404},
		{"GET", u + "/ui/state.json", "/ui/state.json", "", nil, 200},
		{"GET", u + "/healthz", "/healthz", "", nil, 200},
		{"GET", u + "/readyz", "/readyz", "", nil, 200},
		{"GET", u + "/metrics", "/metrics", "", nil, 200},
		{"GET", u + "/metrics", "/metrics", "", []string{"Accept", "application/openmetrics-text; version=1.0.0"}, 200},
		{"GET", u + "/ui/index.html", "/ui/{file}", "", nil, 301},
		{"GET", u + "/openapi.yaml", "/openapi.yaml", "", nil, 200},

		{"POST", u + "/v1/reservations/reserve", "/v1/reservations/reserve", `{"policy":"api","key":"r1","estimate":2}`, nil, 200},
		{"POST", u + "/v1/reservations/reserve", "/v1/reservations/reserve", `{"reservations":[{"policy":"api","key":"r2","estimate":1},{"policy":"quota","key":"r2","estimate":2}]}`, nil, 200},
		{"POST", u + "/v1/reservations/reserve", "/v1/reservations/reserve", `{"policy":"api","key":"r1","estimate":2}`, nil, 429},
		{"POST", u + "/v1/reservations/reserve", "/v1/reservations/reserve", `{"reservations":[{"policy":"quota","key":"r1","estimate":1},{"policy":"api","key":"r1","estimate":3}]}`, nil, 429},
		{"POST", u + "/v1/reservations/reserve", "/v1/reservations/reserve", `{"policy":"api","key":"r1","estimate":9}`, nil, 400},
		{"POST", u + "/v1/reservations/reserve", "/v1/reservations/reserve", `{"policy":"login","key":"r1","estimate":1}`, nil, 400},
		{"POST", u + "/v1/reservations/reserve", "/v1/reservations/reserve", `{"policy":"nope","key":"r1","estimate":1}`, nil, 404},
		{"POST", u + "/v1/reservations/settle", "/v1/reservations/settle", `{"policy":"api","key":"s1","reservation":"` + sid + `","actual":2}`, nil, 200},
		{"POST", u + "/v1/reservations/settle", "/v1/reservations/settle", `{"policy":"api","key":"s1","reservation":"` + sid + `","actual":2}`, nil, 200},
		{"POST", u + "/v1/reservations/settle", "/v1/reservations/settle", `{"settlements":[{"policy":"api","key":"s1","reservation":"` + sid + `","actual":2},{"policy":"api","key":"s1","reservation":"rAAAAAAAAAAAAAAAAAAAAAA","actual":1}]}`, nil, 200},
		{"POST", u + "/v1/reservations/settle", "/v1/reservations/settle", `{"policy":"api","key":"s1","reservation":"rAAAAAAAAAAAAAAAAAAAAAA","actual":1}`, nil, 404},
		{"POST", u + "/v1/reservations/settle", "/v1/reservations/settle", `{"policy":"api","key":"s1","reservation":"forged","actual":1}`, nil, 400},
		{"POST", u + "/v1/reservations/settle", "/v1/reservations/settle", `{"policy":"api","key":"s1","reservation":"` + sid + `","actual":-1}`, nil, 400},
	}
	// Leases: a lease taken beforehand renews and releases; a forged
	// well-formed id renews with 410 and releases nothing.
	_, body := send(t, "POST", u+"/v1/leases/acquire", `{"policy":"exports","key":"held"}`, nil)
	var held struct{ Lease string }
	if err := json.Unmarshal(body, &held); err != nil || held.Lease == "" {
		t.Fatalf("acquire: %s", body)
	}
	forged := "h" + strings.Repeat("A", 21) + "Q"
	cases = append(cases,
		apiCase{"POST", u + "/v1/leases/acquire", "/v1/leases/acquire", `{"policy":"exports","key":"t"}`, nil, 200},
		apiCase{"POST", u + "/v1/leases/acquire", "/v1/leases/acquire", `{"policy":"exports","key":"t"}`, nil, 200},
		apiCase{"POST", u + "/v1/leases/acquire", "/v1/leases/acquire", `{"policy":"exports","key":"t"}`, nil, 429},
		apiCase{"POST", u + "/v1/leases/acquire", "/v1/leases/acquire", `{"policy":"api","key":"t"}`, nil, 400},
		apiCase{"POST", u + "/v1/leases/acquire", "/v1/leases/acquire", `{"policy":"nope","key":"t"}`, nil, 404},
		apiCase{"POST", u + "/v1/leases/acquire", "/v1/leases/acquire", `{"policy":"exports","key":"t","lease":"x"}`, nil, 400},
		apiCase{"POST", u + "/v1/leases/acquire", "/v1/leases/acquire", `{"policy":"exports","key":"` + strings.Repeat("k", DefaultMaxBodyBytes) + `"}`, nil, 413},
		apiCase{"POST", u + "/v1/leases/renew", "/v1/leases/renew", `{"policy":"exports","key":"held","lease":"` + held.Lease + `"}`, nil, 200},
		apiCase{"POST", u + "/v1/leases/renew", "/v1/leases/renew", `{"policy":"exports","key":"held","lease":"` + forged + `"}`, nil, 410},
		apiCase{"POST", u + "/v1/leases/renew", "/v1/leases/renew", `{"policy":"exports","key":"held","lease":"not-a-lease"}`, nil, 400},
		apiCase{"POST", u + "/v1/leases/renew", "/v1/leases/renew", `{"policy":"nope","key":"held","lease":"` + forged + `"}`, nil, 404},
		apiCase{"POST", u + "/v1/leases/renew", "/v1/leases/renew", `{"policy":"exports","key":"` + strings.Repeat("k", DefaultMaxBodyBytes) + `"}`, nil, 413},
		apiCase{"POST", u + "/v1/leases/release", "/v1/leases/release", `{"policy":"exports","key":"held","lease":"` + held.Lease + `"}`, nil, 200},
		apiCase{"POST", u + "/v1/leases/release", "/v1/leases/release", `{"policy":"exports","key":"held","lease":"` + held.Lease + `"}`, nil, 200},
		apiCase{"POST", u + "/v1/leases/release", "/v1/leases/release", `{"policy":"exports","key":"held"}`, nil, 400},
		apiCase{"POST", u + "/v1/leases/release", "/v1/leases/release", `{"policy":"nope","key":"held","lease":"` + forged + `"}`, nil, 404},
		apiCase{"POST", u + "/v1/leases/release", "/v1/leases/release", `{"policy":"exports","key":"` + strings.Repeat("k", DefaultMaxBodyBytes) + `"}`, nil, 413},
		apiCase{"POST", u + "/v1/check", "/v1/check", `{"policy":"exports","key":"t"}`, nil, 400},
	)
	// Forward auth answers any method: allowed, refused, a path it cannot
	// match, and off.
	for _, m := range openAPIMethods {
		m = strings.ToUpper(m)
		for _, fl := range []struct {
			path    string
			uri     string
			refused int
			badPath int
		}{{"/v1/forward-auth", "X-Forwarded-Uri", 429, 400}, {"/v1/forward-auth/nginx", "X-Original-Uri", 403, 403}} {
			who := "X-Forwarded-For"
			ip := "198.51.100." + strconv.Itoa(len(cases)%250)
			cases = append(cases,
				apiCase{m, u + fl.path, fl.path, "", []string{fl.uri, "/login", who, ip}, 200},
				apiCase{m, u + fl.path, fl.path, "", []string{fl.uri, "/login", who, ip}, fl.refused},
				apiCase{m, u + fl.path, fl.path, "", []string{fl.uri, "/a%00b", who, ip}, fl.badPath},
				apiCase{m, ets.URL + fl.path, fl.path, "", nil, 404},
			)
		}
	}
	cases = append(cases,
		apiCase{"GET", u + "/v1/forward-auth/nginx/refused/login", "/v1/forward-auth/nginx/refused/{policy}", "", nil, 429},
		apiCase{"GET", u + "/v1/forward-auth/nginx/refused/nope", "/v1/forward-auth/nginx/refused/{policy}", "", nil, 404})
	// The request bodies the document's schemas refuse, for their bounds;
	// it accepts every body the server accepted.
	schemaRefuses := map[string]bool{}
	for _, i := range []int{5, 6, 7, 8, 32, 33, 37} { // malformed, key, checks, cost, limit, actor, body
		if cases[i].code < 400 {
			t.Fatalf("case %d is not a refusal: %+v", i, cases[i])
		}
		schemaRefuses[cases[i].body] = true
	}
	// Every operation, and also the status of each case, as documented.
	seen := map[string]bool{}
	for _, c := range cases {
		resp, body := send(t, c.method, c.url, c.body, c.hdr)
		if resp.StatusCode != c.code {
			t.Errorf("%s %s: %d, want %d\n%s", c.method, c.url, resp.StatusCode, c.code, body)
		}
		a.check(t, c.method, c.path, resp, body)
		seen[c.method+" "+c.path] = true
		if c.body != "" && (resp.StatusCode < 300 || schemaRefuses[c.body]) {
			err := a.request(t, c.method, c.path, c.body)
			if schemaRefuses[c.body] && err == nil {
				t.Errorf("%s %s: the document's request schema accepts what the server refused (%d):\n%.200s", c.method, c.path, c.code, c.body)
			}
			if !schemaRefuses[c.body] && err != nil {
				t.Errorf("%s %s: the document's request schema refuses what the server accepted: %v\n%.200s", c.method, c.path, err, c.body)
			}
		}
		if c.path == "/openapi.yaml" && !bytes.Equal(body, openAPI) {
			t.Errorf("GET /openapi.yaml is not the embedded document")
		}
	}
	for path, item := range a.doc["paths"].(map[string]any) {
		for m := range item.(map[string]any) {
			if slices.Contains(openAPIMethods, m) && !seen[strings.ToUpper(m)+" "+path] {
				t.Errorf("no case exercises %s %s", strings.ToUpper(m), path)
			}
		}
	}

	// The answers of any route: 405 (with Allow) for another method of a
	// routed path, 404 for a path without a route, 431 for oversized
	// headers; each a Problem.
	problemOK := func(what string, resp *http.Response, body []byte, code int) {
		t.Helper()
		if resp.StatusCode != code {
			t.Errorf("%s: %d, want %d\n%s", what, resp.StatusCode, code, body)
		}
		a.checkBody(t, what, "/components/responses/BadRequest", "", resp, body) // a Problem
	}
	s, _ := newTestServer(t, openAPIYAML)
	for _, r := range s.routes() {
		if r.method == "" {
			continue
		}
		url := u + strings.NewReplacer("{policy}", "api", "{key...}", "k", "{file...}", "app.js").Replace(r.path)
		resp, body := send(t, "PATCH", url, "", nil)
		problemOK("PATCH "+r.path, resp, body, http.StatusMethodNotAllowed)
		if allow := resp.Header.Get("Allow"); !strings.Contains(allow, r.method) {
			t.Errorf("PATCH %s: Allow %q lacks %s", r.path, allow, r.method)
		}
	}
	resp, body := send(t, "GET", u+"/v2/nope", "", nil)
	problemOK("GET /v2/nope", resp, body, http.StatusNotFound)
	resp, body = send(t, "GET", u+"/healthz", "", []string{"X-Big", strings.Repeat("h", MaxHeaderBytes)})
	problemOK("oversized headers", resp, body, http.StatusRequestHeaderFieldsTooLarge)
	a.check(t, "GET", "/healthz", resp, body)
}

// pingDownStore is downStore, failing its pings too (not ready).
type pingDownStore struct{ *downStore }

func (pingDownStore) Ping(context.Context) error { return errors.New("store down") }

// noRedirects shows each answer as sent, redirects too.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func send(t *testing.T, method, url, body string, hdr []string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := noRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}
