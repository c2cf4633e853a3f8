package envoy

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"

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
	body, err := readBody(w, r, s.maxBody)
	if err != nil {
		problem(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	req, err := decodeRequest(body)
	if err != nil {
		problem(w, http.StatusBadRequest, "not a RateLimitRequest in JSON: "+err.Error())
		return
	}
	ans := oneAnswers.Get().(*oneAnswer)
	defer oneAnswers.Put(ans)
	resp, err := s.shouldRateLimit(r.Context(), req, ans)
	if err != nil {
		problem(w, http.StatusBadRequest, status.Convert(err).Message())
		return
	}
	buf := outBufs.Get().(*[]byte)
	defer putOutBuf(buf)
	out, err := appendMarshal((*buf)[:0], resp)
	if err != nil {
		problem(w, http.StatusInternalServerError, "encoding the response failed")
		return
	}
	*buf = out
	w.Header()["Content-Type"] = jsonContentType
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(out)
}

// jsonContentType is POST /json's Content-Type header, one slice for
// every answer (net/http copies the header when it writes it; Header.Set
// would allocate the slice per answer).
var jsonContentType = []string{"application/json"}

// outBufs are the buffers POST /json's answers are written in, reused
// from answer to answer.
var outBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// putOutBuf returns buf to outBufs, unless an unusually large answer grew
// it past what is worth keeping.
func putOutBuf(buf *[]byte) {
	if cap(*buf) <= 8<<10 {
		outBufs.Put(buf)
	}
}

// readBody reads r's body, up to limit bytes: what
// io.ReadAll(http.MaxBytesReader(w, r.Body, limit)) returns, in one
// allocation of the body's size when the request says its length and it
// is within limit (net/http then ends the body at that length); the others
// (no length given, or one over limit, refused by http.MaxBytesReader as
// before) are read by io.ReadAll.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if n := r.ContentLength; n >= 0 && n <= limit {
		return readFull(r.Body, make([]byte, n))
	}
	return io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
}

// readFull reads body from r until it is full or r ends, and returns what
// it read with r's error as io.ReadAll does: none at io.EOF (a body that
// ends early is what it is; net/http's own says io.ErrUnexpectedEOF).
func readFull(r io.Reader, body []byte) ([]byte, error) {
	n := 0
	for n < len(body) {
		m, err := r.Read(body[n:])
		n += m
		if err == io.EOF {
			return body[:n], nil
		}
		if err != nil {
			return body[:n], err
		}
	}
	return body, nil
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
