package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestHTTPTracingRedacts: the HTTP server span continues the caller's
// traceparent, is named by the route's pattern, and holds the method, the
// route and the status code, never the URL's path or query, nor the client's
// address or forwarded-for header, which may hold keys.
func TestHTTPTracingRedacts(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/keys/{policy}/{key...}", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNotFound) })
	h := httpTracing(mux, tp.Tracer("test"), propagation.TraceContext{})
	req := httptest.NewRequest("GET", "/v1/keys/api/secret-path-key?who=secret-query-key", nil)
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	req.Header.Set("X-Forwarded-For", "203.0.113.77")
	req.RemoteAddr = "198.51.100.9:5555"
	h.ServeHTTP(httptest.NewRecorder(), req)
	got := spans.Ended()
	if len(got) != 1 {
		t.Fatalf("%d spans, want 1", len(got))
	}
	s := got[0]
	if s.Name() != "GET /v1/keys/{policy}/{key...}" || s.Parent().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" ||
		s.Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("span %q, parent %v", s.Name(), s.Parent())
	}
	a := map[string]string{}
	for _, kv := range s.Attributes() {
		a[string(kv.Key)] = kv.Value.Emit()
	}
	if a["http.route"] != "/v1/keys/{policy}/{key...}" || a["http.response.status_code"] != "404" || a["http.request.method"] != "GET" || len(a) != 3 {
		t.Errorf("attributes %v, want the method, route and status code only", a)
	}
	for _, secret := range []string{"secret-path-key", "secret-query-key", "203.0.113.77", "198.51.100.9"} {
		for k, v := range a {
			if strings.Contains(v, secret) {
				t.Errorf("%s = %q holds %s", k, v, secret)
			}
		}
	}
}
