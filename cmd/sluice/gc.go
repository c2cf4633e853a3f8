package main

import (
	"log/slog"
	"runtime/debug"
)

// serveGCPercent is the garbage collector's target (GOGC) that sluice serve
// runs with when the environment sets none. The service's live heap is a
// few megabytes while it allocates tens of megabytes a second under load,
// so at Go's default of 100 it collects a dozen times a second and spends
// about a tenth of its CPU doing so (and regrowing the stacks each
// collection shrinks); at 400 the heap peaks at about five times the live
// one instead of twice, a few tens of megabytes, and collections are a
// quarter as frequent. GOGC, and GOMEMLIMIT, set in the environment are
// honoured as they are.
const serveGCPercent = 400

// tuneGC sets the collector's target to serveGCPercent unless GOGC is set,
// and returns the target in force.
func tuneGC(env func(string) (string, bool), logger *slog.Logger) int {
	if v, set := env("GOGC"); set {
		cur := debug.SetGCPercent(-1)
		debug.SetGCPercent(cur)
		logger.Debug("garbage collector target from GOGC", "GOGC", v, "percent", cur)
		return cur
	}
	debug.SetGCPercent(serveGCPercent)
	return serveGCPercent
}
