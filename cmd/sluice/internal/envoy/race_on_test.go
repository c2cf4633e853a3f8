//go:build race

package envoy

// raceOn: the race detector drops a quarter of sync.Pool's Puts at random,
// so what a call takes from a pool is sometimes allocated afresh.
const raceOn = true
