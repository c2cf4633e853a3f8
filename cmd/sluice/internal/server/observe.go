package server

import (
	"context"
	"time"

	"github.com/sluicehq/sluice"
)

// combine returns the observer of the server's limiters: pm (the
// Prometheus metrics), and extra (Options.Observer) when set, which is told
// each decision's context when it is a sluice.ContextObserver (for
// tracing).
func combine(pm, extra sluice.Observer) sluice.Observer {
	if extra == nil {
		return pm
	}
	if c, ok := extra.(sluice.ContextObserver); ok {
		return ctxObservers{pm, c}
	}
	return observers{pm, extra}
}

// ctxObservers passes each decision to a plain observer and a
// ContextObserver.
type ctxObservers struct {
	plain sluice.Observer
	ctx   sluice.ContextObserver
}

func (o ctxObservers) ObserveDecision(limiter string, res sluice.Result, err error, latency time.Duration) {
	o.plain.ObserveDecision(limiter, res, err, latency)
	o.ctx.ObserveDecision(limiter, res, err, latency)
}

func (o ctxObservers) ObserveContext(ctx context.Context, ob sluice.Observation) {
	o.plain.ObserveDecision(ob.Limiter, ob.Result, ob.Err, ob.Latency)
	o.ctx.ObserveContext(ctx, ob)
}

// ObserveLease passes a lease event to the observers that take them (the
// metrics always do).
func (o ctxObservers) ObserveLease(limiter string, ev sluice.LeaseEvent) {
	observers{o.plain, o.ctx}.ObserveLease(limiter, ev)
}
