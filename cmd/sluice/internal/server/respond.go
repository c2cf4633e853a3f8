package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice"
	problemjson "github.com/sluicehq/sluice/cmd/sluice/internal/problem"
)

// Writing responses: JSON, problem+json, and the mapping of errors to statuses.

// problem writes an RFC 9457 problem+json answer (package problem: the
// one writer of the service's problem bodies).
func problem(w http.ResponseWriter, status int, detail string) { problemjson.Write(w, status, detail) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		problem(w, http.StatusInternalServerError, "encoding the response failed")
		return
	}
	h := w.Header()
	h["Content-Type"], h["X-Content-Type-Options"] = jsonContentType, nosniff
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// badRequest is an error the client caused.
type badRequest struct {
	status int
	msg    string
}

func (e *badRequest) Error() string { return e.msg }

func bad(status int, format string, args ...any) error {
	return &badRequest{status: status, msg: fmt.Sprintf(format, args...)}
}

// decisionError maps a limiter error: invalid input is the client's fault,
// the rest (its context ended, the store failed where the limiter could not
// fall back) is not.
func (s *Server) decisionError(err error, p *policy) error {
	switch {
	case errors.Is(err, sluice.ErrInvalidCost):
		if p != nil {
			return bad(http.StatusBadRequest, "cost exceeds the limit %d of policy %q and could never be allowed", p.cfg.Limit, p.cfg.Name)
		}
		return bad(http.StatusBadRequest, "invalid cost: %s", sluice.Reason(err))
	case errors.Is(err, sluice.ErrInvalidKey):
		return bad(http.StatusBadRequest, "key is empty")
	}
	return err
}

// fail writes err: a client error as its 4xx, anything else as 503 (the
// decision could not be made; never a 500 for what the client sent).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var br *badRequest
	if errors.As(err, &br) {
		problem(w, br.status, br.msg)
		return
	}
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		// The client went away; nobody reads this.
		problem(w, http.StatusServiceUnavailable, "the request was canceled")
		return
	}
	s.log.Warn("decision failed", "method", r.Method, "path", r.URL.Path, "err", err)
	problem(w, http.StatusServiceUnavailable, "the decision could not be made: "+err.Error())
}
