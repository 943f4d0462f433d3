package main

import (
	"runtime/debug"
	"testing"
)

// TestTuneClientGC: the client sets GOGC=400 when $GOGC is unset, keeps
// the user's setting otherwise, and restore puts back what was there.
func TestTuneClientGC(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)

	restore := tuneClientGC(func(string) string { return "" })
	if got := debug.SetGCPercent(clientGCPercent); got != clientGCPercent {
		t.Fatalf("GOGC unset: collector target %d, want %d", got, clientGCPercent)
	}
	restore()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("after restore: %d, want 100", got)
	}

	restore = tuneClientGC(func(k string) string {
		if k == "GOGC" {
			return "150"
		}
		return ""
	})
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC=150 given: collector target changed to %d", got)
	}
	restore()
}
