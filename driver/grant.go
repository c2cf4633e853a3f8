package driver

import (
	"context"
	"fmt"
	"time"
)

// For store implementers: grants (sluice.WithGrants). A store that keeps
// them implements Granter beside Store; package memstore and package
// valkeystore do (valkeystore with luascript/scripts/grant.lua).
//
// A grant is part of a key's limit handed to one holder (one limiter
// instance, named by a random HolderID) for a short life by the store's
// clock; the holder decides locally against it. The key's central state
// (under GrantKey, apart from the plain algorithm's key) is:
//
//   - for TokenBucket and GCRA (the same bucket: Limit is the burst B,
//     Interval the time per unit): the level L0 in microseconds of credit
//     (Interval per unit, at most B × Interval) and its time;
//   - for FixedWindow (calendar periods included): the window's first
//     instant and its count C (units granted in the window and not given
//     back);
//   - per holder h: G_h, the units granted to h not known to be spent (in
//     units), the end e_h of h's grant, and until when h counts as seen.
//
// The invariant is L0 + ΣG_h × Interval ≤ B × Interval (a window:
// C ≤ Limit), and L0 refills at one microsecond per microsecond up to
// B × Interval − ΣG_h × Interval only: that cap is what keeps a holder from
// banking units. See docs/grants.md for the proof that the holders
// together never admit more than the exact algorithm on one key.
//
// One GrantOp is one atomic step on a key: reap the holders whose grant
// ended (their G_h is dropped; a record unseen for a Life and holding
// nothing is deleted), set G_h = min(Unspent, G_h), refill, give back
// (Return) or reset (Reset), grant x = min(Want, the units available,
// max(fair − G_h, Need)) where fair = max(1, ⌊Limit / (2 × holders)⌋),
// (when x falls short of that for want of units, More says when the
// rest could be there), and end h's grant Life after now (a window's grant ends at the window's
// end at the latest).
//
// Valkey state format (a hash under GrantKey, one per identity; for
// `sluice inspect`): field "v" is the format version ("1"), "l" the level
// (L0 in microseconds of credit; for a window, C in units), "t" the time
// of L0 in microseconds (for a window, the window's first instant), and one
// field "h:<holder>" per holder (the holder's 16 hex digits) whose value is
// three decimal integers separated by spaces: G_h (units), e_h and the
// time until which the holder counts as seen (microseconds since the Unix
// epoch, the store's clock). The key lives until every grant has ended and
// the level could be full again, plus KeyTTLMargin.

// A HolderID names one holder of grants: 64 random bits, one per limiter
// instance (process). The zero HolderID is none.
type HolderID [8]byte

// String returns id in 16 lowercase hex digits, as the store keeps it.
func (id HolderID) String() string { return fmt.Sprintf("%016x", id[:]) }

// A Granter is a Store that keeps grants.
type Granter interface {
	// Grant runs every GrantOp of batch, each one atomic step on its key
	// (see GrantOp), and fills in its Result or Err. Errors are per Op,
	// as for Do.
	Grant(ctx context.Context, batch []GrantOp) error
}

// A GrantOp is one call of a holder to a key's central grant state.
type GrantOp struct {
	// Key is the grant state's key (GrantKey); Plain the key of the same
	// identity's plain algorithm state (Key), which the store only looks
	// for (Result.Mixed), or "" to skip that.
	Key, Plain string
	// Rule is the limiter's validated rule: TokenBucket, GCRA or
	// FixedWindow (calendar periods included) without CountRejected.
	Rule   Rule
	Holder HolderID
	// Unspent is the holder's unspent units of this key when it sent the
	// call (its report R): the store sets G_h = min(Unspent, G_h).
	Unspent int64
	// Want is the units the holder asks for (0: none, only report, renew
	// or give back); Need the units it must have for a decision waiting
	// on this call (0 when none): the fair cap never stops those.
	Want, Need int64
	// Return gives back the Unspent units, which the holder dropped when
	// it sent the call: they go back to the key's level (a window's count,
	// in the same window only), and the holder's record is deleted.
	Return bool
	// Reset sets the level to all that is not held (sluice's Reset):
	// outstanding grants stay valid until they end.
	Reset bool
	// Life is how long the holder's grant lasts from now, by the store's
	// clock: a whole number of milliseconds, from 1ms to MaxGrantLife.
	Life time.Duration
	// Now is the time of the call; the zero Time means the store's clock.
	Now time.Time
	// Deadline is when the call is due, as Op.Deadline.
	Deadline time.Time

	// Result is filled in by the store.
	Result GrantResult
	// Err is the store's error for this Op, if any.
	Err error
}

// GrantResult is what a store answers a GrantOp.
type GrantResult struct {
	// Granted is the units granted by this call (x).
	Granted int64
	// Held is G_h after the call: the units the store counts for the
	// holder, Granted included. The holder keeps at most Held units, all
	// valid until Left after it sent the call.
	Held int64
	// Left is the time from the call to the end of the holder's grant (0
	// when it holds nothing).
	Left time.Duration
	// Holders is the holders seen on the key, this one included.
	Holders int64
	// More is, when Granted is less than the store would have granted
	// had it the units (min(Want, max(fair − G_h, Need))), the time until
	// the rest could be there (0 otherwise): the holder neither renews nor
	// decides beyond its units until then.
	More time.Duration
	// Level is the units available at the store after the call (⌊L0 /
	// Interval⌋; for a window, Limit − C).
	Level int64
	// Mixed reports that the plain key (GrantOp.Plain) holds state: some
	// process decides this key without grants.
	Mixed bool
}

// MaxGrantLife is the longest life of a grant.
const MaxGrantLife = time.Hour

// Validate reports whether a store can execute op.
func (op *GrantOp) Validate() error {
	if err := op.Rule.Validate(); err != nil {
		return err
	}
	if err := Grantable(op.Rule); err != nil {
		return err
	}
	if !op.Now.IsZero() {
		if err := CheckTime("now", op.Now); err != nil {
			return err
		}
	}
	return op.checkFields()
}

// checkFields checks the fields of op other than its rule and time.
func (op *GrantOp) checkFields() error {
	switch {
	case op.Key == "":
		return invalidField("GrantOp.Key", "a grant needs a key")
	case op.Holder == HolderID{}:
		return invalidField("GrantOp.Holder", "a grant needs a holder")
	case !units(op.Unspent) || !units(op.Want) || !units(op.Need):
		return invalidField("GrantOp.Want", "unspent %d, want %d and need %d must be 0 to %d", op.Unspent, op.Want, op.Need, int64(MaxLimit))
	case op.Return && (op.Want > 0 || op.Need > 0 || op.Reset):
		return invalidField("GrantOp.Return", "a give-back asks for nothing and resets nothing (want %d, need %d, reset %v)", op.Want, op.Need, op.Reset)
	case op.Life < time.Millisecond || op.Life > MaxGrantLife || op.Life%time.Millisecond != 0:
		return invalidField("GrantOp.Life", "a grant's life must be a whole number of milliseconds from 1ms to %v, got %v", MaxGrantLife, op.Life)
	}
	return nil
}

// units reports whether n is a count of units a grant call takes.
func units(n int64) bool { return 0 <= n && n <= MaxLimit }

// Grantable reports why grants cannot keep r's guarantee, or nil: only
// TokenBucket, GCRA and FixedWindow (calendar periods included) without
// CountRejected take them.
func Grantable(r Rule) error {
	switch r.Algorithm {
	case AlgorithmTokenBucket, AlgorithmGCRA:
		return nil
	case AlgorithmFixedWindow:
		if r.CountRejected {
			return invalidField("CountRejected", "grants cannot count refused requests (CountRejected): a process refuses locally, and the store never hears of it")
		}
		return nil
	case AlgorithmSlidingWindow:
		return invalidField("Algorithm", "grants cannot keep %v's guarantee: its estimate weights the previous window's count, so a unit granted in one window still counts, by a fraction, in the next, which no local share can follow (use TokenBucket, GCRA or FixedWindow)", r.Algorithm)
	case AlgorithmSlidingLog:
		return invalidField("Algorithm", "grants cannot keep %v's guarantee: it counts each unit at the time it was spent, which the store would no longer know (use TokenBucket, GCRA or FixedWindow)", r.Algorithm)
	case AlgorithmInFlight:
		return invalidField("Algorithm", "grants are shares of a rate, and %v limits how many things run at once, not a rate", r.Algorithm)
	}
	return invalid("unknown algorithm %v", r.Algorithm)
}

// GrantState is the state name of r's grant state in its keys (see
// GrantKey): "g1." and r.State(), so that a key's grant state and its
// plain state never share a key.
func (r Rule) GrantState() string { return "g1." + r.State() }

// GrantKey returns the store key of identity's grant state under the
// limiter named name: <prefix>:<name>:g1.<state>:{<identity>}, in the same
// hash slot as the plain key (Key).
func GrantKey(prefix, name string, rule Rule, identity string) string {
	return string(AppendGrantKey(nil, prefix, name, rule, identity))
}

// AppendGrantKey appends GrantKey(prefix, name, rule, identity) to dst.
func AppendGrantKey(dst []byte, prefix, name string, rule Rule, identity string) []byte {
	dst = append(dst, prefix...)
	dst = append(dst, ':')
	dst = append(dst, name...)
	dst = append(dst, ":g1."...)
	dst = append(dst, rule.State()...)
	dst = append(dst, ':', '{')
	dst = appendIdentity(dst, identity)
	return append(dst, '}')
}

// GrantFair is the fair cap of one holder's units among holders:
// max(1, ⌊limit / (2 × holders)⌋). Half the limit at most is held by
// holders at fair share, so that the level's refill is not capped while
// they hold their shares (docs/grants.md, "Under-admission").
func GrantFair(limit, holders int64) int64 {
	if holders < 1 {
		holders = 1
	}
	return max(1, limit/(2*holders))
}
