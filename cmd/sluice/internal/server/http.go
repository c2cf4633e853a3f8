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

// Handler returns the HTTP API:
//
//	POST   /v1/check                 one check, or {"checks":[...]} decided together
//	GET    /v1/policies              the loaded policies
//	GET    /v1/keys/{policy}/{key}   admin: peek without consuming
//	DELETE /v1/keys/{policy}/{key}   admin: reset ("unlock this user")
//	GET    /v1/top-refused           admin: the most refused keys per policy
//	PUT/GET/DELETE /v1/overrides/{policy}/{key}, GET /v1/overrides/{policy}
//	                                 admin: key overrides (keyoverrides.go)
//	GET    /ui                       the dashboard (embedded files; /ui/state.json)
//	GET    /metrics /healthz /readyz
//	*      /v1/forward-auth /v1/forward-auth/nginx   reverse proxies (forwardauth.go)
//
// Errors are application/problem+json; bad input is a 4xx, never a 500.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	route := func(pattern, name string, h http.HandlerFunc) {
		mux.Handle(pattern, s.instrument(name, h))
	}
	route("POST /v1/check", "check", s.handleCheck)
	route("GET /v1/policies", "policies", s.handlePolicies)
	route("GET /v1/keys/{policy}/{key...}", "keys", s.admin(s.handlePeek))
	route("DELETE /v1/keys/{policy}/{key...}", "keys", s.admin(s.handleReset))
	route("GET /v1/top-refused", "top_refused", s.admin(s.handleTopRefused))
	s.overrideRoutes(route)
	route("GET /ui/state.json", "ui", s.handleUIState)
	ui := s.handleUI()
	route("GET /ui", "ui", ui)
	route("GET /ui/{file...}", "ui", ui)
	route("GET /healthz", "healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	route("GET /readyz", "readyz", s.handleReady)
	route("/v1/forward-auth", "forward_auth", s.handleForwardAuth(flavorForwarded))
	route("/v1/forward-auth/nginx", "forward_auth_nginx", s.handleForwardAuth(flavorNginx))
	metricsHandler := promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{})
	route("GET /metrics", "metrics", metricsHandler.ServeHTTP)
	s.envoyRoutes(route) // /json, /healthcheck, /rlconfig

	// The same paths with any other method: 405 as problem+json, where the
	// mux alone would answer in plain text.
	for path, allow := range map[string]string{
		"/v1/check": "POST", "/v1/policies": "GET", "/v1/keys/{policy}/{key...}": "GET, DELETE", "/v1/top-refused": "GET", "/ui": "GET", "/ui/{file...}": "GET",
		"/healthz": "GET", "/readyz": "GET", "/metrics": "GET",
		"/json": "POST", "/healthcheck": "GET", "/rlconfig": "GET",
	} {
		route(path, "method_not_allowed", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			problem(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s is not supported; use %s", r.Method, r.URL.Path, allow))
		})
	}
	route("/", "not_found", func(w http.ResponseWriter, r *http.Request) {
		problem(w, http.StatusNotFound, fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
	})
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
