// Package sluice is distributed rate limiting for Go services, with Valkey as
// the shared, atomic counter.
//
// A [Limiter] answers "may this happen now?" for a key (a user, an API key,
// an address, an action) under one [Policy]:
//
//   - [FixedWindow]: a counter per aligned window. Cheapest; a client may
//     get up to 2×Limit across a window edge.
//   - [SlidingLog]: one timestamp per request. Exact; memory grows with the
//     limit (at most [MaxSlidingLogLimit]), so use it for low limits on
//     sensitive actions (login, password reset mail, one-time codes).
//   - [SlidingWindow]: the current and previous window's counts, weighted.
//     Approximate (it assumes the previous window's requests were evenly
//     spread), small state: a good general default.
//   - [TokenBucket]: a bucket of Capacity tokens refilled at Rate per Per.
//     Bursts up to the capacity plus a steady rate: APIs.
//   - [GCRA]: the generic cell rate algorithm, equivalent to a token bucket
//     with a single integer of state.
//
// Every decision is one atomic step in the [Store]: on Valkey (package
// valkeystore) one Lua script call against keys of one cluster slot, in
// process (package memstore) one critical section with the same arithmetic,
// so that both return identical Results for identical inputs.
//
// # Keys
//
// A limiter named "api" keeps the state of identity "user:42" under
// "rl:v1:api:gcra:{user:42}" (when it enforces a GCRA: the algorithm and
// its state format, Rule.State, are part of the key). The identity is escaped (so distinct identities
// never share a key), hashed with SHA-256 when long, and is the Valkey
// Cluster hash tag, so all the state of one identity lives in one slot. Keys
// holding e-mail addresses or other personal data should be hashed by the
// caller before they reach Sluice (package login does this for usernames).
//
// # Time
//
// By default the store's clock decides: Valkey's TIME inside the script, so
// application servers with skewed clocks agree. [WithClock] passes the
// caller's clock instead (tests use a fake clock for exact boundaries).
// Durations are resolved to the microsecond.
//
// # Failure
//
// Each decision has a timeout ([WithTimeout], 50ms by default). When the
// store fails or is slow, the limiter decides without it as its owner chose
// ([WithFailMode]): open (allow, the default) for general APIs, closed
// (refuse) for logins and one-time codes. Such a Result has Degraded set.
//
// # Errors
//
// A policy, option, override or cost that cannot be enforced is refused
// with a [*PolicyError]: its Field names what is wrong as this package
// spells it (such as "TokenBucket.Rate" or "WithName"), its Reason says
// why, and it wraps [ErrInvalidPolicy], [ErrInvalidOverride] or
// [ErrInvalidCost] (errors.Is). Its text says the kind once: "sluice:
// invalid policy: SlidingWindow.Window must be at least 1ms, got 0s". A
// program that shows the reason in its own words reads [Reason].
//
// # For store implementers
//
// Everything else here is for a program that uses limiters. A [Store]
// (packages valkeystore and memstore are two) receives batches of [Op]s,
// each a [Rule] to execute on a key, and fills in each [Result]; its part
// of the contract is in store.go's declarations: [Store], [Op] and
// [Op.Validate], the Rule methods a store reads ([Rule.Validate],
// [Rule.Param], [Rule.State], [Rule.TTL], [Rule.Overridden]),
// [KeyTTLMargin], [ErrClockSkew], and, for a store that also keeps
// overrides or tells other processes of resets, [OverrideStore],
// [OverrideRecord], [CheckRecord], [OverrideKey], [OverrideIndex],
// [DeleteNotifier] and [DeleteWatcher]. [Key] and [AppendKey] build the
// keys a limiter sends. Package sluicetest is the conformance suite every
// Store must pass (sluicetest.Run, given the Store and a way to read its
// keys' times to live); package luascript holds the Lua scripts a store on Valkey or
// Redis runs, the arguments they take (including the calendar and
// override bounds) and the replies they give.
package sluice
