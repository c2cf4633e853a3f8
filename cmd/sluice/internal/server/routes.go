package server

import (
	_ "embed"
	"fmt"
	"net/http"
	"strings"
)

// The HTTP API's route table: Handler registers its entries, answers 405
// (with Allow) for the other methods of their paths, and openapi.yaml
// documents exactly these paths and methods (TestOpenAPIRoutes).

//go:generate cp openapi.yaml ../../../../docs/openapi.yaml

// openAPI is the HTTP API as an OpenAPI 3.1 document, served on GET
// /openapi.yaml; docs/openapi.yaml is the same file (TestOpenAPICopy).
//
//go:embed openapi.yaml
var openAPI []byte

// apiRoute is one entry of the route table.
type apiRoute struct {
	// method is the one method answered; "" answers any (forward auth:
	// proxies differ in the method of the sub-request).
	method string
	// path is the pattern's path, as http.ServeMux reads it.
	path string
	// name labels the route's metrics (sluice_http_requests_total{route}).
	name    string
	handler http.HandlerFunc
}

// pattern is r's http.ServeMux pattern.
func (r apiRoute) pattern() string {
	if r.method == "" {
		return r.path
	}
	return r.method + " " + r.path
}

// routes is the route table of Handler.
func (s *Server) routes() []apiRoute {
	var rs []apiRoute
	add := func(pattern, name string, h http.HandlerFunc) {
		method, path, ok := strings.Cut(pattern, " ")
		if !ok {
			method, path = "", pattern
		}
		rs = append(rs, apiRoute{method: method, path: path, name: name, handler: h})
	}
	add("POST /v1/check", "check", s.handleCheck)
	add("POST /v1/leases/acquire", "leases_acquire", s.handleAcquire)
	add("POST /v1/leases/renew", "leases_renew", s.handleRenew)
	add("POST /v1/leases/release", "leases_release", s.handleRelease)
	add("POST /v1/reservations/reserve", "reserve", s.handleReserve)
	add("POST /v1/reservations/settle", "settle", s.handleSettle)
	add("GET /v1/policies", "policies", s.handlePolicies)
	add("GET /v1/keys/{policy}/{key...}", "keys", s.admin(s.handlePeek))
	add("DELETE /v1/keys/{policy}/{key...}", "keys", s.admin(s.handleReset))
	add("GET /v1/top-refused", "top_refused", s.admin(s.handleTopRefused))
	add("PUT /v1/overrides/{policy}/{key...}", "overrides", s.admin(s.handleOverridePut))
	add("GET /v1/overrides/{policy}/{key...}", "overrides", s.admin(s.handleOverrideGet))
	add("DELETE /v1/overrides/{policy}/{key...}", "overrides", s.admin(s.handleOverrideDelete))
	add("GET /v1/overrides/{policy}", "overrides", s.admin(s.handleOverrideList))
	add("/v1/forward-auth", "forward_auth", s.handleForwardAuth(flavorForwarded))
	add("/v1/forward-auth/nginx", "forward_auth_nginx", s.handleForwardAuth(flavorNginx))
	add("GET /v1/forward-auth/nginx/refused/{policy...}", "forward_auth_nginx_refused", s.handleNginxRefused)
	s.envoyRoutes(add) // /json, /healthcheck, /rlconfig
	add("GET /ui/state.json", "ui", s.handleUIState)
	ui := s.handleUI()
	add("GET /ui", "ui", ui)
	add("GET /ui/{file...}", "ui", ui)
	add("GET /healthz", "healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	add("GET /readyz", "readyz", s.handleReady)
	add("GET /metrics", "metrics", s.metricsHandler().ServeHTTP)
	add("GET /openapi.yaml", "openapi", handleOpenAPI)
	return rs
}

// register adds rs to mux through instrument, and for every path whose
// routes name methods, a 405 problem+json for the other methods (the mux
// alone would answer them in plain text, or the catch-all 404).
func (s *Server) register(mux *http.ServeMux, rs []apiRoute) {
	var paths []string
	allow := map[string][]string{}
	for _, r := range rs {
		mux.Handle(r.pattern(), s.instrument(r.name, r.handler))
		if r.method == "" {
			continue
		}
		if allow[r.path] == nil {
			paths = append(paths, r.path)
		}
		allow[r.path] = append(allow[r.path], r.method)
	}
	for _, path := range paths {
		methods := strings.Join(allow[path], ", ")
		if covered(path, paths, allow) {
			continue
		}
		mux.Handle(path, s.instrument("method_not_allowed", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", methods)
			problem(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s is not supported; use %s", r.Method, r.URL.Path, methods))
		}))
	}
}

// covered reports whether the 405 of another path, ending in a {name...}
// wildcard, answers for path with the same methods (/ui/{file...} for
// /ui/state.json): the mux refuses both patterns, neither being more
// specific than the other.
func covered(path string, paths []string, allow map[string][]string) bool {
	for _, other := range paths {
		prefix, ok := strings.CutSuffix(other, "...}")
		if !ok || other == path {
			continue
		}
		prefix = prefix[:strings.LastIndex(prefix, "{")]
		if !strings.Contains(prefix, "{") && strings.HasPrefix(path, prefix) &&
			strings.Join(allow[other], ",") == strings.Join(allow[path], ",") {
			return true
		}
	}
	return false
}

// handleOpenAPI serves the API's OpenAPI document.
func handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Write(openAPI)
}
