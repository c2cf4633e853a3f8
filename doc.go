// Package sluice is distributed rate limiting for Go services, with Valkey as
// the shared, atomic counter.
//
// A [Limiter] answers "may this happen now?" for a key (a user, an API key,
// an address, an action) under one [Policy]:
//
//   - [FixedWindow]: a counter per aligned window. Cheapest; a client may
//     get up to 2×Limit across a window edge.
//   - [SlidingLog]: one timestamp per request. Exact; memory grows with the
//     limit (at most driver.MaxSlidingLogLimit, 1000), so use it for low
//     limits on sensitive actions (login, password reset mail, one-time
//     codes).
//   - [SlidingWindow]: the current and previous window's counts, weighted.
//     Approximate (it assumes the previous window's requests were evenly
//     spread), small state: a good general default.
//   - [TokenBucket]: a bucket of Capacity tokens refilled at Rate per Per.
//     Bursts up to the capacity plus a steady rate: APIs.
//   - [GCRA]: the generic cell rate algorithm, equivalent to a token bucket
//     with a single integer of state.
//
// Every decision is one atomic step in the store (a driver.Store): on Valkey (package
// valkeystore) one Lua script call against keys of one cluster slot, in
// process (package memstore) one critical section with the same arithmetic,
// so that both return identical Results for identical inputs.
//
// # Keys
//
// A limiter named "api" keeps the state of identity "user:42" under
// "rl:v1:api:gcra:{user:42}" (when it enforces a GCRA: the algorithm and
// its state format, Rule.State, are part of the key: see driver.Key). The identity is escaped (so distinct identities
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
// # One hot key across a fleet
//
// [WithGrants] makes a limiter obtain, in one store call, a grant of part of
// a key's limit and decide locally against it, calling the store only to
// renew, extend or give back its grant: for a limit on one key shared by
// many processes. It is exact: over every interval the processes together
// admit at most what the policy admits on one key (the store caps the
// level's refill at the burst less the units it granted, and a holder voids
// its units before the store drops its grant); under-admission is bounded
// by one burst plus the units of crashed processes (docs/grants.md).
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
// Everything here is for a program that uses limiters. What a store
// implements and uses (Store, Op, the store's Result, Rule's execution
// methods, the keys, override records and bounds) is package
// github.com/sluicehq/sluice/driver, as database/sql/driver is for
// database/sql; packages valkeystore and memstore are two stores, and
// package sluicetest is the conformance suite every store must pass.
package sluice
