package server

import (
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/config"
)

// The rate-limit response headers a policy asks for.

// ceilMS rounds up to whole milliseconds: a client that waits RetryAfterMS
// is then never early.
func ceilMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// headers returns the rate-limit response headers the policy asks for, for
// the caller to pass on to its client.
func headers(p *config.Policy, r sluice.Result) map[string]string {
	if p.Headers == config.HeadersNone {
		return nil
	}
	h := make(map[string]string, 6)
	reset := strconv.FormatInt(ceilSeconds(r.ResetAfter), 10)
	if p.Headers&config.HeadersXRateLimit != 0 {
		h["X-RateLimit-Limit"] = strconv.FormatInt(r.Limit, 10)
		h["X-RateLimit-Remaining"] = strconv.FormatInt(r.Remaining, 10)
		h["X-RateLimit-Reset"] = reset
	}
	if p.Headers&config.HeadersIETF != 0 {
		w := max(ceilSeconds(p.Window()), 1)
		h["RateLimit-Policy"] = fmt.Sprintf("%q;q=%d;w=%d", p.Name, r.Limit, w)
		h["RateLimit"] = fmt.Sprintf("%q;r=%d;t=%s", p.Name, r.Remaining, reset)
	}
	if p.Headers&config.HeadersRetryAfter != 0 && !r.Allowed {
		h["Retry-After"] = strconv.FormatInt(max(ceilSeconds(r.RetryAfter), 1), 10)
	}
	return h
}
