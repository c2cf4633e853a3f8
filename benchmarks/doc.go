// Package benchmarks compares Sluice with other Go rate limiters on one
// Valkey, side by side in one run: valkey-go's valkeylimiter, go-redis's
// redis_rate, ulule/limiter and throttled. It is a separate module so that
// importing Sluice never pulls in the peers.
//
// The same comparisons run two ways: cmd/compare, a program that starts its
// own valkey-server and prints a markdown report (decisions/s, latency
// percentiles, errors, bytes per key), and the testing.B benchmarks of this
// package (go test -bench . -benchmem). See README.md for the commands and
// the latest numbers.
package benchmarks
