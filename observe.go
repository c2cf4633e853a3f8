package sluice

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// A ContextObserver is an Observer told more of each decision: the
// caller's context (which carries its trace), what answered, the cost and
// the algorithm, for tracing. A Limiter whose observer (WithObserver) is a
// ContextObserver calls ObserveContext instead of ObserveDecision. It must
// be fast and safe for concurrent use; package sluiceotel implements it for
// OpenTelemetry.
type ContextObserver interface {
	Observer
	// ObserveContext reports a decision made for a caller whose context
	// was ctx (the context given to Allow, AllowN, AllowAll, ...).
	ObserveContext(ctx context.Context, o Observation)
}

// An Observation is one decision as a ContextObserver is told of it.
type Observation struct {
	// Limiter is the limiter's name (WithName).
	Limiter string
	// Key is the store key that holds the state decided on (driver.Key of the limiter's prefix, name and rule):
	// it holds the caller's key in clear, so an observer that exports
	// anything of it must hash it or leave it out.
	Key string
	// Algorithm is the algorithm of the rule that decided (the policy's or
	// a plan's).
	Algorithm driver.Algorithm
	// Cost is the cost asked for (0 for a peek, negative for a give-back).
	Cost int64
	// Result is the decision, as the caller receives it.
	Result Result
	// Err is the store's error when the fail mode decided (Answer is
	// AnswerFailMode), else nil.
	Err error
	// Answer says what answered: the store, the deny cache or the fail
	// mode.
	Answer Answer
	// Start is when the limiter sent the decision to its store (or looked
	// in its deny cache); Latency the time it spent deciding from then,
	// store round trip included (0 for an answer of the deny cache).
	Start   time.Time
	Latency time.Duration
}

// Answer says what answered a decision.
type Answer uint8

// What may answer a decision.
const (
	// AnswerStore: the store decided.
	AnswerStore Answer = iota
	// AnswerDenyCache: the limiter's deny cache answered a key the store
	// had refused, without a round trip (WithDenyCache).
	AnswerDenyCache
	// AnswerFailMode: the store could not decide and the fail mode did
	// (Result.Degraded).
	AnswerFailMode
)

// String returns "store", "deny_cache", "fail_mode" or "grant".
func (a Answer) String() string {
	switch a {
	case AnswerGrant:
		return "grant"
	case AnswerDenyCache:
		return "deny_cache"
	case AnswerFailMode:
		return "fail_mode"
	}
	return "store"
}

// observe reports op's decision, answered by answer, to the limiter's
// observer.
func (l *Limiter) observe(ctx context.Context, op *driver.Op, res Result, answer Answer, start time.Time, latency time.Duration) {
	if l.cobs != nil {
		l.cobs.ObserveContext(ctx, Observation{Limiter: l.cfg.name, Key: op.Key, Algorithm: op.Rule.Algorithm,
			Cost: op.Cost, Result: res, Err: op.Err, Answer: answer, Start: start, Latency: latency})
		return
	}
	l.cfg.observer.ObserveDecision(l.cfg.name, res, op.Err, latency)
}
