package server

import (
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/httplimit"
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

// headers returns the rate-limit response headers the policy asks for,
// for the caller to pass on to its client, as httplimit.WriteHeaders writes
// them (the one writer of these headers): a shadow policy and a degraded
// result are not shown.
func headers(p *policy, plan string, cost int64, r sluice.Result) map[string]string {
	if p.cfg.Headers == config.HeadersNone && !p.cfg.WarningHeader {
		return nil
	}
	st := httplimit.Status{Allowed: r.Allowed, Limits: []httplimit.LimitStatus{{
		Name: p.cfg.Name, Rule: p.ruleOf(plan, r), Cost: cost, Result: r, Shadow: p.cfg.Shadow,
	}}}
	return httplimit.HeaderFields(&st, httplimit.HeaderOptions{
		OmitXRateLimit: p.cfg.Headers&config.HeadersXRateLimit == 0,
		OmitRateLimit:  p.cfg.Headers&config.HeadersIETF == 0,
		OmitRetryAfter: p.cfg.Headers&config.HeadersRetryAfter == 0,
		Warning:        p.cfg.WarningHeader,
	})
}

// ruleOf is the rule that decided r under plan: the plan's (or the
// policy's), with the limit and window or rate of the key's override when
// one decided (sluice.Rule.InForce, from what the store reported).
func (p *policy) ruleOf(plan string, r sluice.Result) sluice.Rule {
	rule, ok := p.limiter.PlanRule(plan)
	if !ok {
		rule = p.limiter.Rule()
	}
	return httplimit.InForce(rule, r)
}
