package main

import (
	"io"
	"log/slog"
	"runtime/debug"
	"testing"
)

// Not parallel: the collector's target is the process's.
func TestTuneGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))

	unset := func(string) (string, bool) { return "", false }
	if got := tuneGC(unset, logger); got != serveGCPercent {
		t.Errorf("without GOGC: tuneGC = %d, want %d", got, serveGCPercent)
	}
	if got := debug.SetGCPercent(100); got != serveGCPercent {
		t.Errorf("without GOGC: the collector's target is %d, want %d", got, serveGCPercent)
	}

	// GOGC in the environment: the runtime applied it at start; it stays.
	debug.SetGCPercent(150)
	set := func(k string) (string, bool) { return "150", k == "GOGC" }
	if got := tuneGC(set, logger); got != 150 {
		t.Errorf("with GOGC=150: tuneGC = %d, want 150", got)
	}
	if got := debug.SetGCPercent(100); got != 150 {
		t.Errorf("with GOGC=150: the collector's target is %d, want 150", got)
	}
}
