package main

import (
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// Not parallel: the collector's target is the process's.
func TestTuneGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))

	unset := func(string) (string, bool) { return "", false }
	got, stop := tuneGC(unset, logger)
	if got != serveGCPercent {
		t.Errorf("without GOGC: tuneGC = %d, want %d", got, serveGCPercent)
	}
	// This test's live heap is far below serveHeapFloor: after a
	// collection, the target rises so that the heap may grow to the floor.
	runtime.GC()
	var live uint64
	deadline := time.Now().Add(10 * time.Second)
	for {
		cur := debug.SetGCPercent(-1)
		debug.SetGCPercent(cur)
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		live = ms.HeapAlloc
		if cur > serveGCPercent && live*uint64(100+cur)/100 >= serveHeapFloor/2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("without GOGC, after a collection: target %d with %d bytes in use, want one letting the heap grow to about %d", cur, live, serveHeapFloor)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	stop()

	// Stopped: the next collections leave the target alone.
	debug.SetGCPercent(123)
	runtime.GC()
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
	if cur := debug.SetGCPercent(100); cur != 123 {
		t.Errorf("after stop: the collector's target is %d, want 123 (left alone)", cur)
	}

	// GOGC in the environment: the runtime applied it at start; it stays.
	debug.SetGCPercent(150)
	set := func(k string) (string, bool) { return "150", k == "GOGC" }
	got, stop = tuneGC(set, logger)
	defer stop()
	if got != 150 {
		t.Errorf("with GOGC=150: tuneGC = %d, want 150", got)
	}
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
	if got := debug.SetGCPercent(100); got != 150 {
		t.Errorf("with GOGC=150: the collector's target is %d, want 150", got)
	}
}

// gcPercentFor against its definition, on random live heaps, floors and
// bases: at least base; when the floor is above the live heap, the heap
// may grow to it (live × (100 + p) ≥ floor × 100); and the smallest such
// percent (p - 1 would not do, or p is base), unless bounded by
// maxGCPercent.
func TestGCPercentFor(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		floor := uint64(1 + rng.IntN(1<<30))
		var live uint64
		switch rng.IntN(4) {
		case 0:
			live = uint64(rng.IntN(1024)) // tiny, zero included
		case 1:
			live = floor + uint64(rng.IntN(1<<20)) // above the floor
		default:
			live = uint64(rng.Int64N(int64(floor) + 1))
		}
		base := rng.IntN(2000)
		p := gcPercentFor(live, floor, base)
		l := max(live, 1)
		switch {
		case p < base:
			t.Fatalf("gcPercentFor(%d, %d, %d) = %d: below base", live, floor, base, p)
		case p == maxGCPercent:
			// bounded: the floor may be out of reach
		case l*uint64(100+p) < floor*100:
			t.Fatalf("gcPercentFor(%d, %d, %d) = %d: the heap may grow to %d only, below the floor", live, floor, base, p, l*uint64(100+p)/100)
		case p > base && l*uint64(100+p-1) >= floor*100:
			t.Fatalf("gcPercentFor(%d, %d, %d) = %d: %d would do", live, floor, base, p, p-1)
		}
	}
	if p := gcPercentFor(4<<20, serveHeapFloor, serveGCPercent); p != 1500 {
		t.Errorf("a live heap of 4 MiB: %d, want 1500 (64 MiB)", p)
	}
	if p := gcPercentFor(100<<20, serveHeapFloor, serveGCPercent); p != serveGCPercent {
		t.Errorf("a live heap of 100 MiB: %d, want %d", p, serveGCPercent)
	}
}
