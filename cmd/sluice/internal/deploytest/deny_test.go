package deploytest

import (
	"net/http"
	"strconv"
	"testing"
)

// TestNginxDenyResponse: through a real nginx with deploy/nginx, a
// policy's deny_status and deny_body reach the client (auth_request passes
// on only 403: @ratelimited asks Sluice for the policy's response), with
// Retry-After; a policy without them still answers 429 problem+json.
func TestNginxDenyResponse(t *testing.T) {
	s := startStackEdited(t, func(y string) string {
		return replaceAll(t, "forward-auth.yaml", y, "    window: 15m\n    on_failure: deny\n",
			"    window: 15m\n    on_failure: deny\n    deny_status: 503\n    deny_body: {error: too many logins, retry: later}\n")
	})
	base := startNginx(t, s)
	for i := 1; i <= 5; i++ {
		if a := send(t, "POST", base+"/login"); a.code != 200 {
			t.Fatalf("login %d: %d %q", i, a.code, a.body)
		}
	}
	a := send(t, "POST", base+"/login")
	ra, err := strconv.Atoi(a.header.Get("Retry-After"))
	if a.code != http.StatusServiceUnavailable || a.body != `{"error":"too many logins","retry":"later"}` ||
		a.header.Get("Content-Type") != "application/json" || err != nil || ra < 1 {
		t.Fatalf("sixth login: %d %q %v, want 503 with the policy's body and Retry-After", a.code, a.body, a.header)
	}
	// The api policy has no deny_status: 429 problem+json.
	for i := 0; i < 40; i++ {
		a = send(t, "GET", base+"/items")
		if a.code != 200 {
			break
		}
	}
	if a.code != http.StatusTooManyRequests || a.header.Get("Content-Type") != "application/problem+json" || a.header.Get("Retry-After") == "" {
		t.Fatalf("api refused: %d %q %v, want 429 problem+json", a.code, a.body, a.header)
	}
}
