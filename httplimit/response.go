package httplimit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// The response each limit chooses for the requests it refuses
// (Limit.DenyStatus, Limit.DenyBody).

// checkResponse refuses a DenyStatus that is not an HTTP error status and
// a DenyBody that is not JSON.
func checkResponse(status int, body json.RawMessage) error {
	if status != 0 && (status < 400 || status > 599) {
		return fmt.Errorf("DenyStatus must be an HTTP error status (400 to 599), got %d", status)
	}
	if body != nil && !json.Valid(body) {
		return fmt.Errorf("DenyBody is not a JSON document")
	}
	return nil
}

// Denier returns the limit whose response answers the refused request st:
// the refusing limit with the longest RetryAfter (the first in Config
// order among equals); nil when st is allowed.
func (s *Status) Denier() *LimitStatus {
	var d *LimitStatus
	for i := range s.Limits {
		l := &s.Limits[i]
		if !l.Result.Allowed && (d == nil || l.Result.RetryAfter > d.Result.RetryAfter) {
			d = l
		}
	}
	return d
}

// DenyStatusCode returns the HTTP status of the refused request st: the
// Denier's DenyStatus, 429 by default.
func (s *Status) DenyStatusCode() int {
	if d := s.Denier(); d != nil && d.DenyStatus != 0 {
		return d.DenyStatus
	}
	return http.StatusTooManyRequests
}

// WriteRefusal answers the refused request st as its Denier chose: its
// DenyBody as application/json with its DenyStatus (429 by default), or
// else the problem+json body of WriteProblem with that status. It is the
// default DenyHandler's answer.
func WriteRefusal(w http.ResponseWriter, st *Status) {
	var d *LimitStatus
	if st != nil {
		d = st.Denier()
	}
	if d == nil || d.DenyBody == nil {
		WriteProblem(w, st)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(d.DenyBody)))
	w.WriteHeader(st.DenyStatusCode())
	w.Write(d.DenyBody)
}
