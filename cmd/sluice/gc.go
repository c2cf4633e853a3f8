package main

import (
	"log/slog"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// serveGCPercent is the garbage collector's target (GOGC) that sluice serve
// runs with when the environment sets none. The service's live heap is a
// few megabytes while it allocates tens of megabytes a second under load,
// so at Go's default of 100 it collects a dozen times a second and spends
// about a tenth of its CPU doing so (and regrowing the stacks each
// collection shrinks); at 400 the heap peaks at about five times the live
// one instead of twice, and collections are a quarter as frequent. GOGC,
// and GOMEMLIMIT, set in the environment are honoured as they are.
const serveGCPercent = 400

// serveHeapFloor is the heap the collector lets grow before collecting,
// at least, when the environment sets no GOGC: while the live heap is below
// a fifth of it, the target is raised above serveGCPercent after each
// collection (gcFloor). Each collection's mark phase slows every call in
// flight for its length (several ms on one core, most of it the calls' own
// assists); at 64 MiB a service with a live heap of 4 MB collects about
// once a second under a gRPC load of 15,000 calls a second instead of four
// times, and fewer of its calls meet a collection
// (benchmarks/history/2026-11-30-envoy-bench.md).
const serveHeapFloor = 64 << 20

// tuneGC sets the collector's target to serveGCPercent, raised for a small
// live heap up to serveHeapFloor (gcFloor), unless GOGC is set. It returns
// the target in force and a function that stops raising it.
func tuneGC(env func(string) (string, bool), logger *slog.Logger) (int, func()) {
	if v, set := env("GOGC"); set {
		cur := debug.SetGCPercent(-1)
		debug.SetGCPercent(cur)
		logger.Debug("garbage collector target from GOGC", "GOGC", v, "percent", cur)
		return cur, func() {}
	}
	debug.SetGCPercent(serveGCPercent)
	f := newGCFloor(serveHeapFloor, serveGCPercent)
	f.arm()
	return serveGCPercent, f.stop
}

// gcFloor sets the collector's target after each collection to
// gcPercentFor the live heap that collection left: base, or more while
// the live heap is small, so that the heap may grow to floor bytes before
// the next collection.
type gcFloor struct {
	floor   uint64
	base    int
	last    int // the target last set (0: none yet); only the finalizer chain touches it
	sample  []metrics.Sample
	stopped atomic.Bool
}

func newGCFloor(floor uint64, base int) *gcFloor {
	return &gcFloor{floor: floor, base: base, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
}

// gcSentinel is an object allocated only to be found unreachable by the
// next collection, whose finalizer then runs: after every collection, one.
// Its pointer keeps it out of the allocator's tiny blocks, whose
// finalizers may never run.
type gcSentinel struct{ _ *int }

// arm makes the next collection call adjust, and arm again.
func (f *gcFloor) arm() {
	runtime.SetFinalizer(new(gcSentinel), func(*gcSentinel) {
		if f.stopped.Load() {
			return
		}
		f.adjust()
		f.arm()
	})
}

// adjust sets the target for the live heap the last collection left.
func (f *gcFloor) adjust() {
	metrics.Read(f.sample)
	if f.sample[0].Value.Kind() != metrics.KindUint64 {
		return // not provided by this runtime: the target stays at base
	}
	if p := gcPercentFor(f.sample[0].Value.Uint64(), f.floor, f.base); p != f.last {
		debug.SetGCPercent(p)
		f.last = p
	}
}

// stop ends the adjustments: the target stays where it is.
func (f *gcFloor) stop() { f.stopped.Store(true) }

// maxGCPercent bounds the target gcPercentFor returns (the runtime's is an
// int32; a live heap of a few bytes would ask for more).
const maxGCPercent = 1 << 20

// gcPercentFor returns the collector's target for a live heap of live
// bytes: the smallest percent, at least base, with which the heap may grow
// to floor bytes before the next collection (live × (100 + percent) / 100
// ≥ floor), bounded by maxGCPercent.
func gcPercentFor(live, floor uint64, base int) int {
	live = max(live, 1)
	if live >= floor || floor > math.MaxUint64/100 {
		return base
	}
	p := (floor*100+live-1)/live - 100 // ceil(floor × 100 / live) - 100
	return max(base, int(min(p, maxGCPercent)))
}
