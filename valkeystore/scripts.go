package valkeystore

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

// script is a Lua script and its SHA-1, for EVALSHA.
type script struct {
	src string
	sha string
}

func newScript(decide string) *script {
	src := preludeLua + decide + batchLua
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:])}
}

var scripts = [...]*script{
	sluice.AlgorithmFixedWindow:   newScript(fixedWindowLua),
	sluice.AlgorithmSlidingLog:    newScript(slidingLogLua),
	sluice.AlgorithmSlidingWindow: newScript(slidingWindowLua),
	sluice.AlgorithmTokenBucket:   newScript(tokenBucketLua),
	sluice.AlgorithmGCRA:          newScript(gcraLua),
}

const (
	argsPerKey  = 6
	replyPerKey = 5
)
