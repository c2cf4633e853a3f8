// Package luascript holds the Lua scripts that decide on Valkey, for every
// store that runs them: their source, their SHA-1 for EVALSHA, and the
// layout of their arguments and replies.
package luascript

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"

	"github.com/sluicehq/sluice"
)

// The scripts, one per algorithm: prelude.lua, the algorithm's decide
// function (scripts/<algorithm>.lua) and the driver batch.lua, which decides
// any number of keys in one call: KEYS[i] with six ARGV each (now, limit,
// parameter, cost, flag, receipt), and replies with five integers per key
// (allowed, remaining, retry after and reset after in microseconds, receipt).
var (
	//go:embed scripts/prelude.lua
	preludeLua string
	//go:embed scripts/batch.lua
	batchLua string
	//go:embed scripts/fixed_window.lua
	fixedWindowLua string
	//go:embed scripts/sliding_log.lua
	slidingLogLua string
	//go:embed scripts/sliding_window.lua
	slidingWindowLua string
	//go:embed scripts/token_bucket.lua
	tokenBucketLua string
	//go:embed scripts/gcra.lua
	gcraLua string
)

// Script is a Lua script and its SHA-1, for EVALSHA.
type Script struct {
	Src string
	SHA string
}

func newScript(decide string) *Script {
	src := preludeLua + decide + batchLua
	sum := sha1.Sum([]byte(src))
	return &Script{Src: src, SHA: hex.EncodeToString(sum[:])}
}

// For returns the script of an algorithm, nil for an unknown one.
func For(alg sluice.Algorithm) *Script {
	if int(alg) >= len(scripts) {
		return nil
	}
	return scripts[alg]
}

var scripts = [...]*Script{
	sluice.AlgorithmFixedWindow:   newScript(fixedWindowLua),
	sluice.AlgorithmSlidingLog:    newScript(slidingLogLua),
	sluice.AlgorithmSlidingWindow: newScript(slidingWindowLua),
	sluice.AlgorithmTokenBucket:   newScript(tokenBucketLua),
	sluice.AlgorithmGCRA:          newScript(gcraLua),
}

// ArgsPerKey is the number of ARGV of each key; ReplyPerKey the number of
// integers of the reply for each key (see batch.lua).
const (
	ArgsPerKey  = 6
	ReplyPerKey = 5
)
