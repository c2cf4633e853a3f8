package envoy

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestJSONBodyLimit: POST /json reads a body of any transfer within the
// limit, and refuses one over it (400, "http: request body too large")
// whether or not the request gave its length; a body shorter than its
// Content-Length is decoded as it is, one the connection ends early
// refused as unexpected EOF, as io.ReadAll reads them.
func TestJSONBodyLimit(t *testing.T) {
	f := newFake(t, "domains:\n  - domain: edge\n    descriptors:\n      - {key: k, rate_limit: {unit: second, requests_per_unit: 10}}\n")
	const limit = 256
	s := New(f, prometheus.NewRegistry(), slog.New(slog.DiscardHandler), limit, Options{})
	mux := http.NewServeMux()
	s.Routes(func(pattern, _ string, h http.HandlerFunc) { mux.HandleFunc(pattern, h) })
	ok := `{"domain":"edge","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`
	over := ok + strings.Repeat(" ", limit)
	const answer = `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":10,"unit":"SECOND"},"limitRemaining":`
	for _, c := range []struct {
		name   string
		body   io.Reader
		length int64 // -1: unknown (chunked)
		code   int
		want   string
	}{
		{"with its length", strings.NewReader(ok), int64(len(ok)), 200, answer},
		{"chunked", io.MultiReader(strings.NewReader(ok)), -1, 200, answer},
		{"over the limit, with its length", strings.NewReader(over), int64(len(over)), 400, "reading the body: http: request body too large"},
		{"over the limit, chunked", io.MultiReader(strings.NewReader(over)), -1, 400, "reading the body: http: request body too large"},
		{"shorter than its length", strings.NewReader(ok[:20]), int64(len(ok)), 400, "not a RateLimitRequest in JSON: "},
		{"ended by the connection", io.MultiReader(strings.NewReader(ok[:20]), errReader{io.ErrUnexpectedEOF}), int64(len(ok)), 400, "reading the body: unexpected EOF"},
	} {
		r := httptest.NewRequest("POST", "/json", c.body)
		r.ContentLength = c.length
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if w.Code != c.code || !strings.Contains(w.Body.String(), c.want) {
			t.Errorf("%s: %d %s, want %d with %q", c.name, w.Code, w.Body, c.code, c.want)
		}
		if c.code == 200 && (!strings.HasPrefix(w.Body.String(), c.want) || w.Header().Get("Content-Type") != "application/json") {
			t.Errorf("%s: %q (%s), want %q... (application/json)", c.name, w.Body, w.Header().Get("Content-Type"), c.want)
		}
	}
}

// errReader fails every read with its error.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// TestJSONAllocations: POST /json answers the usual request (one
// descriptor of one entry, decided in the memory store) in at most 5
// allocations: the body, the request decoded (one, its strings slices of
// the body), the descriptor's key, and the decision's (its results and,
// on a store without driver.TransientKeys, the store's key); none for its
// Op, the answer, its buffer or its Content-Type, which are reused.
func TestJSONAllocations(t *testing.T) {
	f := newFake(t, "domains:\n  - domain: edge\n    descriptors:\n      - {key: k, rate_limit: {unit: second, requests_per_unit: 1000000000}}\n")
	s := New(f, prometheus.NewRegistry(), slog.New(slog.DiscardHandler), 1<<10, Options{})
	body := `{"domain":"edge","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`
	rd := strings.NewReader(body)
	r := httptest.NewRequest("POST", "/json", rd)
	w := &nullWriter{h: http.Header{}}
	s.handleJSON(w, r) // the first call makes what is reused
	allocs := testing.AllocsPerRun(200, func() {
		rd.Reset(body)
		clear(w.h)
		w.code = 0
		s.handleJSON(w, r)
		if w.code != 0 && w.code != 200 {
			t.Fatalf("status %d", w.code)
		}
	})
	t.Logf("%.0f allocations per call", allocs)
	want := 5.0
	if raceOn {
		want++ // the pools' dropped Puts: the answer, its buffer, the Op
	}
	if allocs > want {
		t.Errorf("POST /json: %.0f allocations per call, want at most %.0f", allocs, want)
	}
}

// nullWriter is a ResponseWriter that keeps the status and drops the body.
type nullWriter struct {
	h    http.Header
	code int
}

func (w *nullWriter) Header() http.Header         { return w.h }
func (w *nullWriter) WriteHeader(code int)        { w.code = code }
func (w *nullWriter) Write(b []byte) (int, error) { return len(b), nil }
