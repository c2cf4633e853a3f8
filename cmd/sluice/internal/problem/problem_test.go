package problem

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestWrite(t *testing.T) {
	w := httptest.NewRecorder()
	Write(w, http.StatusTooManyRequests, "retry after 1 second")
	var body map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if w.Code != 429 || w.Header().Get("Content-Type") != "application/problem+json" || w.Header().Get("X-Content-Type-Options") != "nosniff" ||
		body["type"] != "about:blank" || body["title"] != "Too Many Requests" || body["status"] != 429.0 || body["detail"] != "retry after 1 second" {
		t.Errorf("%d %v %v", w.Code, w.Header(), body)
	}
	w = httptest.NewRecorder()
	Write(w, http.StatusNotFound, "")
	if string(w.Body.Bytes()) != `{"type":"about:blank","title":"Not Found","status":404}`+"\n" {
		t.Errorf("no detail: %q", w.Body.String())
	}
}
