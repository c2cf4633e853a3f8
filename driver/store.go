package driver

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A Store keeps the limiters' state and makes each decision atomically.
// Packages valkeystore and memstore implement it; package sluicetest has
// the conformance suite any Store must pass.
type Store interface {
	// Do runs every Op of batch and fills in its Result or Err. Each Op is
	// one atomic decision; different Ops of one batch are independent and
	// may run in any order. Do must return by the earliest Deadline of its
	// Ops (failing those it could not decide), and when ctx ends. It returns
	// an error only when nothing could be attempted (such as a canceled
	// context); otherwise errors are per Op. Do keeps nothing of batch
	// after it returns: the caller reuses its Ops.
	Do(ctx context.Context, batch []Op) error

	// Delete removes all state kept under the given keys. It tells no deny
	// cache (see DeleteNotifier): sluice.Limiter.Reset does.
	Delete(ctx context.Context, keys ...string) error
}

// A TransientKeys store keeps nothing of an Op's Key after its Do returns,
// not even in a command that a network client may still hold after a call
// timed out: it copies the key's bytes where it needs them. A limiter may
// then pass keys built in a buffer that it reuses once Do returns, saving an
// allocation per decision; for any other store, keys are strings of their
// own. Package valkeystore implements it.
type TransientKeys interface {
	Store
	// TransientKeys marks the store; it does nothing.
	TransientKeys()
}

// A DeleteNotifier is a Store that tells the limiters of every process
// sharing it of the keys deleted through it, so that their deny caches
// never keep refusing a key that was reset elsewhere. Package valkeystore
// implements it with Valkey's pub/sub, package memstore in the process.
//
// A limiter's deny cache is on by default only on a store that implements
// it (see sluice.WithDenyCache), and answers from the cache only while the store
// reports that notices reach it (DeleteWatcher.Watching).
type DeleteNotifier interface {
	// DeleteNotify removes all state under keys, as Delete, and then tells
	// every watcher of prefix (WatchDeletes), in every process, of each
	// key. It returns how many subscriptions the notice reached (for
	// valkeystore, one per Store and prefix in each process watching it;
	// for several keys, the least over the keys). An error means the state
	// may or may not be gone and the notice may not have been sent.
	DeleteNotify(ctx context.Context, prefix string, keys ...string) (int, error)
	// WatchDeletes tells w of the keys deleted by DeleteNotify(prefix, …)
	// in any process, until stop is called. The store calls w from its own
	// goroutines, one call at a time, and never while holding up a
	// decision: w must return quickly.
	WatchDeletes(prefix string, w DeleteWatcher) (stop func())
}

// A DeleteWatcher hears of deletes from a DeleteNotifier.
type DeleteWatcher interface {
	// Deleted reports that the state under key was deleted.
	Deleted(key string)
	// Watching reports whether notices reach the watcher from now on:
	// true once every delete from then on will be reported (deletes
	// before may have been missed, so whatever the watcher derived from
	// the store's state may no longer hold), false when deletes may be
	// missed from now on. A watcher starts not watching.
	Watching(live bool)
}

// KeyTTLMargin is added to the time to live of every key, beyond what the
// algorithm needs: state then survives small differences between the clock
// that decides (Valkey's, or a client clock) and the one that expires keys.
// Stale state past its need is harmless: every algorithm recomputes from
// time. valkeystore's scripts use the same value.
const KeyTTLMargin = time.Second

// An Op is one decision for a Store.
type Op struct {
	// Key is the full store key, as built by Key with this Op's Rule: a
	// key holds the state of one algorithm (its Rule.State is part of the
	// key). An Op whose key holds another algorithm's state is outside the
	// contract (memstore refuses it; Valkey may refuse or misread it).
	Key string
	// Rule is the validated rule to apply.
	Rule Rule
	// Cost is the number of units to take. Zero peeks: the Result tells
	// whether a cost of one would be allowed, and nothing is taken. A
	// negative cost refunds the take whose Receipt the Op carries (after a
	// request was refused by another limit): it gives back exactly what that
	// take took, in the window it took it from, or nothing when that is no
	// longer possible (see docs/guarantees.md, "Refunds"). Its Result is allowed.
	Cost int64
	// Receipt is filled in by the store for every decision. A refund
	// (negative Cost) carries the Receipt of the take it gives back; it is
	// the take's time in microseconds, or for GCRA the theoretical arrival
	// time the take wrote.
	Receipt int64
	// Override is the store key of the key's override (see OverrideKey), or
	// "" when the limiter reads none. When a live, well-formed override is
	// stored there, its limit (and parameter) replace the Rule's for this
	// decision, and the Result reports it (Result.Override, with its limit
	// and parameter); a malformed one is ignored and reported by
	// Result.OverrideInvalid.
	Override string
	// Now is the time of the decision. The zero Time means the store's own
	// clock (Valkey's TIME).
	Now time.Time
	// Lease is, for InFlight, the id of the lease the Op acquires (Cost
	// 1), renews (Renew) or releases (Cost -1); zero for a peek (Cost 0)
	// and for every other algorithm. An acquire's Result is allowed when
	// the lease was added, a renewal's when the lease had not ended (it
	// then ends Rule.Window after the decision), a release's when it
	// removed a lease that had not ended. Receipt is then when the lease
	// ends, in microseconds of the deciding clock (the decision's time when
	// it was not added or renewed).
	Lease LeaseID
	// Renew makes an InFlight Op with a Lease a renewal (Cost 0).
	Renew bool
	// Penalty is the limiter's penalty (see Penalty and Penalizer); the
	// zero Penalty means none. PenaltyKey is then the store key of the
	// key's penalty state (PenaltyKey), "" when Penalty is zero.
	Penalty    Penalty
	PenaltyKey string
	// Deadline is when the decision is due (the limiter's timeout); the zero
	// Time means only ctx bounds it. It travels with the Op rather than as a
	// context, so that a store that merges concurrent decisions pays for
	// one timer per merged call instead of one per decision.
	Deadline time.Time

	// Result is filled in by the store.
	Result Result
	// Err is the store's error for this Op, if any.
	Err error
}

// Validate reports whether a store can execute op: its Rule is valid, its
// Now is the zero Time or one a store keeps (MinTime to MaxTime), and a refund
// carries the Receipt of a take.
func (op *Op) Validate() error {
	if err := op.Rule.Validate(); err != nil {
		return err
	}
	if !op.Now.IsZero() {
		if err := CheckTime("now", op.Now); err != nil {
			return err
		}
	}
	if err := validatePenaltyOp(op); err != nil {
		return err
	}
	if op.Rule.Algorithm == AlgorithmInFlight || !op.Lease.IsZero() || op.Renew {
		return validateLeaseOp(op)
	}
	if op.Cost < 0 && op.Receipt == 0 {
		return &PolicyError{Err: ErrInvalidCost, Field: "Op.Receipt", Reason: fmt.Sprintf("a refund (cost %d) needs the Receipt of the take it gives back", op.Cost)}
	}
	return nil
}

// ErrClockSkew is a store's error for a decision with calendar periods
// whose time (the store's clock, or the Op's Now) is outside the periods
// computed around the clock of the process that sent it: the two clocks
// differ by about a period or more.
var ErrClockSkew = errors.New("sluice: deciding clock outside the calendar periods sent (clock skew)")

// OverrideRecord is an override as a store keeps it: what the store reads
// when deciding (Limit, Param in microseconds, 0 keeping the rule's, and
// Expires, a whole microsecond from MinTime to MaxTime), and Info, which
// the store keeps for the limiter unread. Set is when the limiter set it,
// on the limiter's clock: the store keeps the record for Expires - Set of
// its own time, so that an override set under a clock other than the
// store's (WithClock) lives as long as that clock says; the zero Set means
// the store's own clock.
type OverrideRecord struct {
	Identity string
	Limit    int64
	Param    int64
	Expires  time.Time
	Info     string
	Set      time.Time
}

// CheckRecord reports whether a store can keep rec: Expires is a whole
// microsecond from MinTime to MaxTime, and after Set when Set is given. It
// is an error wrapping ErrInvalidOverride otherwise. Stores call it from PutOverride, so that every
// store refuses what one of them cannot keep.
func CheckRecord(rec OverrideRecord) error {
	if r := timeReason("expires", rec.Expires); r != "" {
		return badOverride("OverrideRecord.Expires", "%s", r)
	}
	if rec.Expires.Nanosecond()%1000 != 0 {
		return badOverride("OverrideRecord.Expires", "expires %v is not a whole microsecond", rec.Expires.Format(time.RFC3339Nano))
	}
	if !rec.Set.IsZero() {
		if r := timeReason("set", rec.Set); r != "" {
			return badOverride("OverrideRecord.Set", "%s", r)
		}
		if !rec.Expires.After(rec.Set) {
			return badOverride("OverrideRecord.Expires", "expires %v is not after set (%v)", rec.Expires.Format(time.RFC3339Nano), rec.Set.Format(time.RFC3339Nano))
		}
	}
	return nil
}

// OverrideStore is implemented by stores that keep overrides (memstore,
// valkeystore). An override record lives under its key (OverrideKey) until
// it expires; index lists the identities that have one, for listing.
type OverrideStore interface {
	// PutOverride stores rec under key until rec.Expires, and lists it in
	// index.
	PutOverride(ctx context.Context, index, key string, rec OverrideRecord) error
	// GetOverride returns the record under key; ok is false when there
	// is none. The record may have lapsed (the caller checks Expires
	// against its own clock): the store drops it by its own time.
	GetOverride(ctx context.Context, key string) (rec OverrideRecord, ok bool, err error)
	// DeleteOverride removes the record under key and its entry in index.
	DeleteOverride(ctx context.Context, index, key, identity string) error
	// ListOverrides returns the records listed in index, lapsed ones
	// included until the store drops them, as GetOverride; keyOf gives an
	// identity's key.
	ListOverrides(ctx context.Context, index string, keyOf func(identity string) string) ([]OverrideRecord, error)
}

// OverrideKey returns the store key of identity's override under the
// limiter named name: <prefix>:<name>:ov:{<identity>}, with the same hash
// tag as the identity's counters, so that on a cluster a script reads it
// in the same slot.
func OverrideKey(prefix, name, identity string) string {
	b := make([]byte, 0, len(prefix)+len(name)+len(identity)+10)
	b = append(b, prefix...)
	b = append(b, ':')
	b = append(b, name...)
	b = append(b, ":ov:{"...)
	b = appendIdentity(b, identity)
	return string(append(b, '}'))
}

// OverrideIndex returns the store key that lists the limiter's overrides.
func OverrideIndex(prefix, name string) string { return prefix + ":" + name + ":ovindex" }
