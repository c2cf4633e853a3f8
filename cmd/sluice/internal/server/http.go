package server

import (
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler returns the HTTP API: the routes of the route table (routes.go,
// documented by openapi.yaml, served on GET /openapi.yaml), 405 for the
// other methods of their paths, 404 for any other path, and 431 for
// requests whose header fields take more than MaxHeaderBytes.
//
// Errors are application/problem+json; bad input is a 4xx, never a 500.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	s.register(mux, s.routes())
	mux.Handle("/", s.instrument("not_found", func(w http.ResponseWriter, r *http.Request) {
		problem(w, http.StatusNotFound, fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
	}))
	tooLarge := s.instrument("headers_too_large", func(w http.ResponseWriter, r *http.Request) {
		problem(w, http.StatusRequestHeaderFieldsTooLarge,
			fmt.Sprintf("the request's header fields take more than %d bytes", MaxHeaderBytes))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if headerBytes(r) > MaxHeaderBytes {
			tooLarge.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// MaxHeaderBytes is the most a request's header fields may take (names,
// values and their separators, Host included): larger requests are
// answered 431 as problem+json. The http.Server's own MaxHeaderBytes must
// be larger (sluice serve uses HeaderReadLimit), since net/http answers
// what exceeds it in plain text before any handler runs.
const MaxHeaderBytes = 32 << 10

// HeaderReadLimit is the http.Server's MaxHeaderBytes for Handler: net/http's
// default, 1 MiB, far above MaxHeaderBytes.
const HeaderReadLimit = http.DefaultMaxHeaderBytes

// headerBytes is the size of r's header fields as sent: "Name: value\r\n"
// each.
func headerBytes(r *http.Request) int {
	n := len("Host: \r\n") + len(r.Host)
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// statusWriter records the status code for metrics.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (s *Server) instrument(name string, h http.HandlerFunc) http.Handler {
	dur := s.metrics.httpDuration.WithLabelValues(name)
	counts := &routeCounters{vec: s.metrics.httpRequests, route: name}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("panic in handler", "route", name, "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v))
				if sw.code == 0 {
					problem(sw, http.StatusInternalServerError, "internal error")
				}
			}
			if sw.code == 0 {
				sw.code = http.StatusOK
			}
			counts.get(sw.code).Inc()
			dur.Observe(time.Since(start).Seconds())
		}()
		h(sw, r)
	})
}

// routeCounters are one route's request counters by status code, looked
// up in a map read without a lock instead of hashing two labels into the
// vector on every request. Status codes are three digits, so the map stays
// small.
type routeCounters struct {
	vec   *prometheus.CounterVec
	route string
	mu    sync.Mutex // held to add a code
	codes atomic.Pointer[map[int]prometheus.Counter]
}

func (r *routeCounters) get(code int) prometheus.Counter {
	if m := r.codes.Load(); m != nil {
		if c, ok := (*m)[code]; ok {
			return c
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.codes.Load()
	if old != nil {
		if c, ok := (*old)[code]; ok {
			return c
		}
	}
	next := make(map[int]prometheus.Counter, 1)
	if old != nil {
		maps.Copy(next, *old)
	}
	c := r.vec.WithLabelValues(r.route, strconv.Itoa(code))
	next[code] = c
	r.codes.Store(&next)
	return c
}

// metricsHandler serves the server's registry in Prometheus's text format.
func (s *Server) metricsHandler() http.Handler {
	return promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{})
}
