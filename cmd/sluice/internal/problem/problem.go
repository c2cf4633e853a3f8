// Package problem writes the service's RFC 9457 problem+json answers: one
// writer for the HTTP API's errors and the Envoy-compatible routes', so that
// their bodies cannot drift apart (docs/openapi.yaml's Problem schema).
package problem

import (
	"encoding/json"
	"net/http"
)

// Write answers status with a problem+json body whose detail says why.
func Write(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail,omitempty"`
	}{"about:blank", http.StatusText(status), status, detail})
	w.Write(append(b, '\n'))
}
