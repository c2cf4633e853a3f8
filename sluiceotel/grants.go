package sluiceotel

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The attributes of the grant metrics (ObserveGrants), beside AttrPolicy.
const (
	// AttrGrantEvent is, on sluice.grants, "taken" or "renewed"; on
	// sluice.grant.units, "granted", "returned" or "expired" (sluiceprom's
	// event label).
	AttrGrantEvent = attribute.Key("rate_limit.grant.event")
	// AttrGrantWhere is where a decision of a limiter with grants was
	// made: "local", "valkey" (after a grant call to the store) or
	// "failed" (by the fail mode): sluiceprom's where label.
	AttrGrantWhere = attribute.Key("rate_limit.grant.where")
)

// grantInstruments are the observable instruments of the grant metrics.
type grantInstruments struct {
	calls, grants, units, decisions, mixed metric.Int64ObservableCounter
	keys                                   metric.Int64ObservableGauge
}

// ObserveGrants exports the grant counters of limiters with grants
// (sluice.WithGrants), read from Limiter.GrantStats at each collection
// and attributed to their names (limiters of one name are summed), as
// sluiceprom's sluice_grant_* metrics:
//
//	sluice.grant.calls      counter  {call}      grant calls to the store: takes, renewals, give-backs
//	sluice.grants           counter  {grant}     rate_limit.grant.event: taken, renewed
//	sluice.grant.units      counter  {unit}      rate_limit.grant.event: granted, returned, expired
//	sluice.grant.decisions  counter  {decision}  rate_limit.grant.where: local, valkey, failed
//	sluice.grant.mixed      counter  {call}      calls that found the key decided without grants too
//	sluice.grant.keys       gauge    {key}       keys holding grant state in this process
//
// Each with rate_limit.policy. The Observer keeps the limiters until the
// returned Registration is unregistered.
func (o *Observer) ObserveGrants(limiters ...*sluice.Limiter) (metric.Registration, error) {
	ls := append([]*sluice.Limiter(nil), limiters...)
	return o.ObserveGrantsFunc(func() map[string]sluice.GrantStats {
		out := make(map[string]sluice.GrantStats, len(ls))
		for _, l := range ls {
			out[l.Name()] = out[l.Name()].Add(l.GrantStats())
		}
		return out
	})
}

// ObserveGrantsFunc exports, at each collection, the grant counters f
// returns by limiter name (see ObserveGrants): for limiters replaced over
// time, f carries the counters of those replaced, so that the counters
// never go back. Give each name to one registration only.
func (o *Observer) ObserveGrantsFunc(f func() map[string]sluice.GrantStats) (metric.Registration, error) {
	in, err := o.grantInstruments()
	if err != nil {
		return nil, fmt.Errorf("sluiceotel: %w", err)
	}
	reg, err := o.meter.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		for name, s := range f() {
			in.observe(obs, AttrPolicy.String(name), s)
		}
		return nil
	}, in.calls, in.grants, in.units, in.decisions, in.mixed, in.keys)
	if err != nil {
		return nil, fmt.Errorf("sluiceotel: %w", err)
	}
	return reg, nil
}

// grantInstruments makes the grant metrics' instruments (a meter gives
// the same ones to a second call).
func (o *Observer) grantInstruments() (*grantInstruments, error) {
	var in grantInstruments
	var errs [6]error
	in.calls, errs[0] = o.meter.Int64ObservableCounter("sluice.grant.calls", metric.WithUnit("{call}"),
		metric.WithDescription("Grant calls to the store of limiters with grants, by limiter: takes, renewals and give-backs."))
	in.grants, errs[1] = o.meter.Int64ObservableCounter("sluice.grants", metric.WithUnit("{grant}"),
		metric.WithDescription("Grants obtained, by limiter and rate_limit.grant.event: taken (for a key holding none) or renewed."))
	in.units, errs[2] = o.meter.Int64ObservableCounter("sluice.grant.units", metric.WithUnit("{unit}"),
		metric.WithDescription("Units of grants, by limiter and rate_limit.grant.event: granted, returned (a quiet key, an eviction, Close) or expired (the grant ended unspent)."))
	in.decisions, errs[3] = o.meter.Int64ObservableCounter("sluice.grant.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Decisions of limiters with grants, by limiter and rate_limit.grant.where: local (against the grant, no call), valkey (waited for a grant call to the store) or failed (the call failed: the fail mode decided)."))
	in.mixed, errs[4] = o.meter.Int64ObservableCounter("sluice.grant.mixed", metric.WithUnit("{call}"),
		metric.WithDescription("Grant calls that found the key's plain state: some process decides the limiter without grants, enforcing the limit twice."))
	in.keys, errs[5] = o.meter.Int64ObservableGauge("sluice.grant.keys", metric.WithUnit("{key}"),
		metric.WithDescription("Keys holding grant state in this process, by limiter."))
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return &in, nil
}

// observe observes the grant counters s of the limiter policy names.
func (in *grantInstruments) observe(obs metric.Observer, policy attribute.KeyValue, s sluice.GrantStats) {
	with := func(k attribute.Key, v string) metric.ObserveOption {
		return metric.WithAttributes(policy, k.String(v))
	}
	only := metric.WithAttributes(policy)
	obs.ObserveInt64(in.calls, s.Calls, only)
	obs.ObserveInt64(in.grants, s.Taken, with(AttrGrantEvent, "taken"))
	obs.ObserveInt64(in.grants, s.Renewed, with(AttrGrantEvent, "renewed"))
	obs.ObserveInt64(in.units, s.Granted, with(AttrGrantEvent, "granted"))
	obs.ObserveInt64(in.units, s.Returned, with(AttrGrantEvent, "returned"))
	obs.ObserveInt64(in.units, s.Expired, with(AttrGrantEvent, "expired"))
	obs.ObserveInt64(in.decisions, s.Local, with(AttrGrantWhere, "local"))
	obs.ObserveInt64(in.decisions, s.Store, with(AttrGrantWhere, "valkey"))
	obs.ObserveInt64(in.decisions, s.Failed, with(AttrGrantWhere, "failed"))
	obs.ObserveInt64(in.mixed, s.Mixed, only)
	obs.ObserveInt64(in.keys, s.Keys, only)
}
