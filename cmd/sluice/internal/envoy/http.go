package envoy

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"google.golang.org/grpc/status"
)

// envoyproxy/ratelimit's HTTP endpoints: POST /json (ShouldRateLimit in
// protobuf's JSON form), GET /healthcheck, and its debug port's GET
// /rlconfig (the loaded limits as text).

// Routes registers the endpoints with route (the server's route table,
// which instruments them).
func (s *Service) Routes(route func(pattern, name string, h http.HandlerFunc)) {
	route("POST /json", "json", s.handleJSON)
	route("GET /healthcheck", "healthcheck", s.handleHealthcheck)
	route("GET /rlconfig", "rlconfig", s.handleRLConfig)
}

// handleJSON answers a RateLimitRequest in protobuf's JSON form: 200 with
// the response when OK, 429 when OVER_LIMIT, 400 for a request that does
// not decode or is refused, as envoyproxy/ratelimit answers.
func (s *Service) handleJSON(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		problem(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	var req rlsv3.RateLimitRequest
	if err := decodeRequest(body, &req); err != nil {
		problem(w, http.StatusBadRequest, "not a RateLimitRequest in JSON: "+err.Error())
		return
	}
	resp, err := s.Decide(r.Context(), &req)
	if err != nil {
		problem(w, http.StatusBadRequest, status.Convert(err).Message())
		return
	}
	out, err := marshalResponse(resp)
	if err != nil {
		problem(w, http.StatusInternalServerError, "encoding the response failed")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(out)
}

// handleHealthcheck answers "OK" while a configuration is loaded and,
// with Options.StoreHealth, the store answers.
func (s *Service) handleHealthcheck(w http.ResponseWriter, r *http.Request) {
	if s.srv.Current() == nil {
		http.Error(w, "no configuration loaded", http.StatusInternalServerError)
		return
	}
	if s.opts.StoreHealth != nil {
		if err := s.opts.StoreHealth(r.Context()); err != nil {
			http.Error(w, "the store does not answer: "+err.Error(), http.StatusInternalServerError)
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "OK")
}

// handleRLConfig lists the loaded limits, one line each:
// "domain.key_value.key: unit=MINUTE requests_per_unit=10, shadow_mode: false, quota_mode: false".
func (s *Service) handleRLConfig(w http.ResponseWriter, r *http.Request) {
	var lines []string
	st := s.srv.Current()
	if st == nil {
		http.Error(w, "no configuration loaded", http.StatusInternalServerError)
		return
	}
	cfg := st.Config()
	var walk func(prefix string, ds []*config.Descriptor)
	walk = func(prefix string, ds []*config.Descriptor) {
		for _, d := range ds {
			key := prefix + "." + d.StatName()
			switch {
			case d.Unlimited:
				lines = append(lines, fmt.Sprintf("%s: unlimited, shadow_mode: %t, quota_mode: %t", key, d.Shadow, d.QuotaMode))
			case d.Limit != nil:
				lines = append(lines, fmt.Sprintf("%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t",
					key, d.Limit.Unit, d.Limit.RequestsPerUnit, d.Shadow, d.QuotaMode))
			case d.Policy != "":
				lines = append(lines, fmt.Sprintf("%s: policy=%s, shadow_mode: %t, quota_mode: %t", key, d.Policy, d.Shadow, d.QuotaMode))
			}
			walk(key, d.Children)
		}
	}
	for _, dom := range cfg.Domains {
		walk(dom.Name, dom.Descriptors)
	}
	sort.Strings(lines)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, strings.Join(lines, "\n")+"\n")
}
