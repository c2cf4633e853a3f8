package server

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/memstore"
)

const reserveYAML = `
policies:
  - {name: rpm, algorithm: fixed_window, limit: 100, window: 1m}
  - {name: tpm, algorithm: token_bucket, burst: 10000, rate: 10000/m, max_debt: 2000}
  - {name: strict, algorithm: gcra, burst: 10, rate: 10/h, max_debt: 0}
`

// TestReserveSettle: POST /v1/reservations/reserve and /settle as the API
// reference names them: reserve an estimate, settle below (given back),
// above (charged into debt, bounded by max_debt), twice (settled false),
// an unknown id 404, a malformed one 400; several policies in one call.
func TestReserveSettle(t *testing.T) {
	_, ts := newTestServer(t, reserveYAML)
	reserve := ts.URL + "/v1/reservations/reserve"
	settle := ts.URL + "/v1/reservations/settle"
	r := do(t, "POST", reserve, `{"policy":"tpm","key":"tenant:42","estimate":4000}`)
	id, _ := r.body["reservation"].(string)
	if r.code != 200 || r.body["allowed"] != true || len(id) != 23 || r.body["remaining"] != 6000.0 || r.body["limit"] != 10000.0 {
		t.Fatalf("reserve: %d %s", r.code, r.raw)
	}
	s := do(t, "POST", settle, `{"policy":"tpm","key":"tenant:42","reservation":"`+id+`","actual":1234}`)
	if s.code != 200 || s.body["settled"] != true || s.body["debt"] != 0.0 {
		t.Fatalf("settle: %d %s", s.code, s.raw)
	}
	if rem := s.body["remaining"].(float64); rem < 8766 || rem > 8767 {
		t.Errorf("remaining after settling 1234 of 4000: %v, want 8766 (and a token earned meanwhile at most)", rem)
	}
	again := do(t, "POST", settle, `{"policy":"tpm","key":"tenant:42","reservation":"`+id+`","actual":1234}`)
	if again.code != 200 || again.body["settled"] != false || again.body["status"] != "already_settled" {
		t.Errorf("second settle: %d %s", again.code, again.raw)
	}
	// Above the estimate: the excess goes into debt, up to max_debt.
	r = do(t, "POST", reserve, `{"policy":"tpm","key":"t2","estimate":10000}`)
	id2, _ := r.body["reservation"].(string)
	s = do(t, "POST", settle, `{"policy":"tpm","key":"t2","reservation":"`+id2+`","actual":15000}`)
	if s.code != 200 || s.body["charged"].(float64) < 1999 || s.body["unpaid"].(float64) < 3000 || s.body["debt"].(float64) < 1990 {
		t.Errorf("settle above: %d %s", s.code, s.raw)
	}
	r = do(t, "POST", reserve, `{"policy":"tpm","key":"t2","estimate":1}`)
	if r.code != 429 || r.body["allowed"] != false || r.header.Get("Retry-After") == "" || r.body["retry_after_ms"].(float64) < 11000 {
		t.Errorf("reserve in debt: %d %s %v", r.code, r.raw, r.header)
	}
	// max_debt: 0 allows none.
	r = do(t, "POST", reserve, `{"policy":"strict","key":"k","estimate":10}`)
	id3, _ := r.body["reservation"].(string)
	s = do(t, "POST", settle, `{"policy":"strict","key":"k","reservation":"`+id3+`","actual":12}`)
	if s.body["charged"] != 0.0 || s.body["unpaid"] != 2.0 || s.body["debt"] != 0.0 {
		t.Errorf("max_debt 0: %s", s.raw)
	}
	// Several policies at once; refused by tpm, rpm keeps its unit.
	m := do(t, "POST", reserve, `{"reservations":[{"policy":"rpm","key":"t2","estimate":1},{"policy":"tpm","key":"t2","estimate":100}]}`)
	if m.code != 429 || m.body["allowed"] != false {
		t.Fatalf("multi reserve: %d %s", m.code, m.raw)
	}
	m = do(t, "POST", reserve, `{"reservations":[{"policy":"rpm","key":"t3","estimate":1},{"policy":"tpm","key":"t3","estimate":100}]}`)
	res := m.body["results"].([]any)
	r1, r2 := res[0].(map[string]any)["reservation"].(string), res[1].(map[string]any)["reservation"].(string)
	ms := do(t, "POST", settle, `{"settlements":[{"policy":"rpm","key":"t3","reservation":"`+r1+`","actual":1},{"policy":"tpm","key":"t3","reservation":"`+r2+`","actual":50}]}`)
	if ms.code != 200 || !strings.Contains(ms.raw, `"status":"settled"`) || strings.Contains(ms.raw, "unknown") {
		t.Errorf("multi settle: %d %s", ms.code, ms.raw)
	}
	if p := do(t, "POST", ts.URL+"/v1/check", `{"policy":"rpm","key":"t2","cost":0}`); p.body["remaining"] != 100.0 {
		t.Errorf("rpm after a refused multi reserve: %s", p.raw)
	}
	for _, c := range []struct {
		url, body string
		code      int
		detail    string
	}{
		{settle, `{"policy":"tpm","key":"other","reservation":"` + id + `","actual":1}`, 404, "unknown"},
		{settle, `{"policy":"tpm","key":"tenant:42","reservation":"xyz","actual":1}`, 400, "invalid reservation id"},
		{settle, `{"policy":"tpm","key":"tenant:42","reservation":"` + id + `"}`, 400, "actual must be given"},
		{reserve, `{"policy":"tpm","key":"k","estimate":-1}`, 400, "estimate"},
		{reserve, `{"policy":"tpm","key":"k","estimate":20000}`, 400, "could never be allowed"},
		{reserve, `{"policy":"tpm","key":"k","estimate":"a"}`, 400, `body: estimate must be a whole number`},
		{settle, `{"policy":"tpm","key":"k","reservation":"` + id + `","actual":1.5}`, 400, `body: actual must be a whole number`},
	} {
		r := do(t, "POST", c.url, c.body)
		if r.code != c.code || !strings.Contains(r.raw, c.detail) || strings.Contains(r.raw, "Item.") {
			t.Errorf("%s: %d %s, want %d with %q", c.body, r.code, r.raw, c.code, c.detail)
		}
	}
}

// TestMaxDebtConfig: max_debt is refused for an algorithm that takes no
// reservations, and where the debt would not fit a key's time to live.
func TestMaxDebtConfig(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"policies:\n  - {name: a, algorithm: sliding_log, limit: 2, window: 1m, max_debt: 5}\n", "max_debt is not used by sliding_log"},
		{"policies:\n  - {name: a, algorithm: fixed_window, limit: 2, window: 1m, max_debt: -1}\n", "max_debt"},
	} {
		_, err := config.Parse("x.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.yaml, err, c.want)
		}
	}
	cfg, err := config.Parse("x.yaml", []byte("policies:\n  - {name: a, algorithm: token_bucket, burst: 10, rate: 1/d, max_debt: 100000}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg, Options{Store: memstore.New(), StoreName: "memory", Logger: quietLogger()}); err == nil || !strings.Contains(err.Error(), "MaxWindow") {
		t.Errorf("a debt beyond a key's life: %v", err)
	}
}
