package sluiceotel

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/valkeystore"
	"github.com/valkey-io/valkey-go"
	"github.com/valkey-io/valkey-go/valkeyotel"
	"go.opentelemetry.io/otel/metric"
)

// ValkeyOptions are valkeyotel's options for a Valkey client whose command
// spans and metrics go to o's providers, with RedactStatement as its
// db.statement: the command without its keys.
func (o *Observer) ValkeyOptions() []valkeyotel.Option {
	return []valkeyotel.Option{
		valkeyotel.WithTracerProvider(o.tp),
		valkeyotel.WithMeterProvider(o.mp),
		valkeyotel.WithDBStatement(RedactStatement),
	}
}

// WrapValkey returns client instrumented by valkeyotel (ValkeyOptions): a
// span and metrics per command, children of the caller's span when the
// command carries its context. Give the result to valkeystore.New, or
// give WrapValkey itself to valkeystore.WithClientWrap for
// valkeystore.Connect. (A batch valkeystore merges from several callers'
// decisions carries none of their contexts: its span starts a trace.)
func (o *Observer) WrapValkey(client valkey.Client) valkey.Client {
	return valkeyotel.WithClient(client, o.ValkeyOptions()...)
}

// RedactStatement is a valkeyotel.StatementFunc that keeps of a command
// what identifies no key: its name; for a script (EVALSHA, EVAL, FCALL and
// their _RO forms), the script's SHA-1 or function name, the number of
// keys, and the arguments that are integers; every other token (a key, a
// script's source, any argument of another command, such as the key in a
// delete notice) becomes "?". sluice's store keys always hold their
// prefix, never only digits, so no key survives.
func RedactStatement(tokens []string) string {
	if len(tokens) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(tokens[0])
	script := false
	keepFirst := false
	switch strings.ToUpper(tokens[0]) {
	case "EVALSHA", "EVALSHA_RO", "FCALL", "FCALL_RO":
		script, keepFirst = true, true
	case "EVAL", "EVAL_RO":
		script = true
	}
	numkeys := -1
	for i, t := range tokens[1:] {
		b.WriteByte(' ')
		switch {
		case script && i == 0 && keepFirst && identifier(t):
			b.WriteString(t)
		case script && i == 1 && integer(t):
			numkeys, _ = strconv.Atoi(t)
			b.WriteString(t)
		case script && i >= 2+numkeys && numkeys >= 0 && integer(t):
			b.WriteString(t) // an argument, not a key
		default:
			b.WriteByte('?')
		}
	}
	return b.String()
}

// integer reports whether t is a decimal integer.
func integer(t string) bool {
	_, err := strconv.ParseInt(t, 10, 64)
	return err == nil
}

// identifier reports whether t is a script's SHA-1 or a function's name:
// letters, digits and underscores.
func identifier(t string) bool {
	if t == "" || len(t) > 64 {
		return false
	}
	for _, c := range t {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Breakers is what ObserveBreakers reads: a valkeystore.Store, or the
// service's Lazy store.
type Breakers interface {
	Breakers() map[string]valkeystore.BreakerState
}

// ObserveBreakers exports the state of src's circuit breakers as the gauge
// sluice.breaker.state: for each Valkey node (rate_limit.store.node), 1
// for its breaker's state (rate_limit.breaker.state: closed, open,
// half-open) and 0 for the others, read at each collection. Unregister the
// returned Registration to stop.
func (o *Observer) ObserveBreakers(src Breakers) (metric.Registration, error) {
	g, err := o.meter.Int64ObservableGauge("sluice.breaker.state", metric.WithUnit("1"),
		metric.WithDescription("State of the circuit breaker of each Valkey node: 1 for the current state (closed, open, half-open), 0 for the others."))
	if err != nil {
		return nil, fmt.Errorf("sluiceotel: %w", err)
	}
	states := [...]valkeystore.BreakerState{valkeystore.BreakerClosed, valkeystore.BreakerOpen, valkeystore.BreakerHalfOpen}
	reg, err := o.meter.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		for node, st := range src.Breakers() {
			for _, s := range states {
				v := int64(0)
				if s == st {
					v = 1
				}
				obs.ObserveInt64(g, v, metric.WithAttributes(AttrNode.String(node), AttrBreakerState.String(s.String())))
			}
		}
		return nil
	}, g)
	if err != nil {
		return nil, fmt.Errorf("sluiceotel: %w", err)
	}
	return reg, nil
}
