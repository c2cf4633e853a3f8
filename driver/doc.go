// Package driver is what a store for package sluice implements and uses,
// as package database/sql/driver is for database/sql. A program that only
// uses limiters needs package sluice alone.
//
// A [Store] keeps the limiters' state and makes each decision atomically:
// sluice's limiters send it batches of [Op]s, each a validated [Rule] to
// execute on a key built by [Key] (or [AppendKey]), with a cost, a receipt
// for refunds, an override key, a time and a deadline, and the store fills
// in each Op's [Result] or Err. A store must:
//
//   - decide each Op in one atomic step, as the Rule's [Algorithm] says,
//     taking nothing on a refusal (except under Rule.CountRejected);
//   - check what it cannot execute ([Op.Validate], which calls
//     [Rule.Validate]) and fail that Op rather than decide it wrong;
//   - keep a key no longer than [Rule.TTL] (which includes [KeyTTLMargin]),
//     use [Rule.State] and [Rule.Param] as the scripts take them, and for
//     calendar periods ([Calendar], [Rule.Span]) refuse a decision whose
//     clock is outside the periods sent with [ErrClockSkew];
//   - when an Op names an override key, apply a live record there as
//     [Rule.Overridden] does and report it in Result.Override, and report
//     a malformed one in Result.OverrideInvalid;
//   - return by the earliest Deadline of a batch, and keep nothing of the
//     batch after Do returns.
//
// A store that also keeps overrides implements [OverrideStore] (records
// are [OverrideRecord]s checked by [CheckRecord], under [OverrideKey] and
// listed in [OverrideIndex]); one that tells other processes of resets, so
// their deny caches forget a key, implements [DeleteNotifier] and calls
// [DeleteWatcher]s; one that decides penalties (an Op's [Penalty], under
// its [PenaltyKey], in the same atomic step as the decision) implements
// [Penalizer] and fills in Result.Blocked and Result.BlockStarted.
//
// A store that keeps grants (sluice.WithGrants) implements [Granter]: one
// [GrantOp] per call of a holder to a key's central grant state under
// [GrantKey], whose Valkey format grant.go documents.
//
// An Op of [AlgorithmInFlight] (sluice.InFlight) names its lease
// ([Op.Lease], a [LeaseID]) to acquire (Cost 1), renew ([Op.Renew]) or
// release (Cost -1) it; a key holds at most the Rule's Limit leases, each
// ending the Rule's Window after its acquire or last renewal. Every such
// decision first removes the key's ended leases and reports how many in
// [Result.Expired] (sluicetest.RunInFlight checks it).
//
// The bounds ([MaxLimit], [MinWindow], [MaxWindow], [MaxSlidingLogLimit],
// [MaxInFlightLimit], [MinTime], [MaxTime]) keep every count, time stamp and time to live exact
// in the float64 numbers Lua computes with. Errors of rules and records are
// [*PolicyError]s wrapping [ErrInvalidPolicy], [ErrInvalidCost],
// [ErrInvalidOverride], [ErrInvalidLease] or [ErrInvalidTime]; package sluice re-declares
// those a user tests for, with the same values.
//
// Package sluicetest is the conformance suite every Store must pass
// (sluicetest.Run, given the Store and a way to read its keys' times to
// live); package luascript holds the Lua scripts a store on Valkey or Redis
// runs, the arguments they take (including the calendar and override
// bounds) and the replies they give. Packages memstore and valkeystore are
// two stores.
package driver
