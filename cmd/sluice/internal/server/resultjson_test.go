package server

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
)

// randomResult is a Result of random fields, strings plain or not.
func randomResult(r *rand.Rand) Result {
	s := func() string {
		if r.IntN(40) == 0 {
			return []string{"é", "<", ">", "&", "\t", "\x7f", "\u2028", "\xff"}[r.IntN(8)] // written by json.Marshal
		}
		return []string{"", "api", "user-1", "gcra 100/1s", "plan", `q"`, `b\`, `"api";r=1;t=2`, "~ ok"}[r.IntN(9)]
	}
	n := func() int64 { return []int64{0, 1, -1, 42, 1 << 40, -1 << 62}[r.IntN(6)] }
	res := Result{Policy: s(), Key: s(), Allowed: r.IntN(2) == 0, Limit: n(), Remaining: n(), RetryAfterMS: n(), ResetAfterMS: n(),
		Degraded: r.IntN(2) == 0, Shadow: r.IntN(2) == 0, Source: s(), Plan: s(), Rule: s(), WindowMS: n(),
		OverrideInvalid: r.IntN(4) == 0, Warning: r.IntN(4) == 0, Blocked: r.IntN(4) == 0, BlockStarted: r.IntN(4) == 0, DenyStatus: []int{0, 429, 503}[r.IntN(3)]}
	switch r.IntN(3) {
	case 0:
		res.Headers = map[string]string{}
		for range r.IntN(6) {
			res.Headers[s()] = s()
		}
	case 1:
		res.Headers = map[string]string{"RateLimit": "\"api\";r=1;t=2", "RateLimit-Policy": "\"api\";q=10;w=1"}
		if r.IntN(2) == 0 {
			res.Headers = map[string]string{"RateLimit-Limit": "10", "RateLimit-Remaining": "9", "RateLimit-Reset": "1"}
		}
	}
	if r.IntN(8) == 0 {
		res.DenyBody = json.RawMessage([]string{`{"error":"slow down"}`, `{ "a" : 1 }`, ``}[r.IntN(3)])
	}
	return res
}

// TestResultJSON: writeResult writes, byte for byte, what writeJSON
// writes (json.Marshal and its newline, the same status and headers),
// whether appendResult writes it or leaves it to json.Marshal; on random
// results, a good share of them written directly.
func TestResultJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	direct := 0
	for i := range 5000 {
		res := randomResult(r)
		if _, ok := appendResult(nil, &res); ok {
			direct++
		}
		want, got := httptest.NewRecorder(), httptest.NewRecorder()
		writeJSON(want, 200, res)
		writeResult(got, 200, &res)
		if !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) || got.Code != want.Code ||
			got.Header().Get("Content-Type") != want.Header().Get("Content-Type") ||
			got.Header().Get("X-Content-Type-Options") != want.Header().Get("X-Content-Type-Options") || len(got.Header()) != len(want.Header()) {
			t.Fatalf("%d: %+v\nwrote        %d %v %s\njson.Marshal %d %v %s", i, res, got.Code, got.Header(), got.Body, want.Code, want.Header(), want.Body)
		}
	}
	t.Logf("%d of 5000 written directly", direct)
	if direct < 500 {
		t.Fatalf("only %d of 5000 written directly", direct)
	}
}

// TestResultAllocations: the usual answer of POST /v1/check (a policy's
// result with its rate-limit headers) is written without allocating:
// its buffer and header values are reused, where json.Marshal and
// Header.Set took a dozen allocations.
func TestResultAllocations(t *testing.T) {
	res := Result{Allowed: true, Limit: 100, Remaining: 99, ResetAfterMS: 100, Source: "policy", Rule: "token_bucket 100 burst, 10/s", WindowMS: 10000,
		Headers: map[string]string{"RateLimit": `"bench";r=99;t=1`, "RateLimit-Policy": `"bench";q=100;w=10`}}
	w := &discardWriter{h: http.Header{}}
	writeResult(w, 200, &res)
	allocs := testing.AllocsPerRun(100, func() {
		clear(w.h)
		writeResult(w, 200, &res)
	})
	if allocs > 0 {
		t.Errorf("writing the usual answer: %.0f allocations, want none", allocs)
	}
}

// discardWriter is a ResponseWriter that drops what is written.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(int)             {}
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }

// TestResultJSONEveryField: each field of Result, set alone to a value
// other than its zero, is written as json.Marshal writes it, so a field
// added to Result cannot be left out of appendResult unnoticed.
func TestResultJSONEveryField(t *testing.T) {
	typ := reflect.TypeFor[Result]()
	for i := range typ.NumField() {
		res := Result{Source: "policy", Rule: "r"}
		f := reflect.ValueOf(&res).Elem().Field(i)
		switch {
		case f.Kind() == reflect.String:
			f.SetString("x")
		case f.Kind() == reflect.Bool:
			f.SetBool(true)
		case f.CanInt():
			f.SetInt(7)
		case f.Type() == reflect.TypeFor[json.RawMessage]():
			f.SetBytes([]byte(`{"a":1}`))
		case f.Kind() == reflect.Map:
			f.Set(reflect.ValueOf(map[string]string{"a": "b"}))
		default:
			t.Fatalf("field %s: kind %s not covered by this test", typ.Field(i).Name, f.Kind())
		}
		want, got := httptest.NewRecorder(), httptest.NewRecorder()
		writeJSON(want, 200, res)
		writeResult(got, 200, &res)
		if !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) {
			t.Errorf("%s set: wrote %s, json.Marshal %s", typ.Field(i).Name, got.Body, want.Body)
		}
	}
}
