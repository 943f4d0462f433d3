package main

import (
	"os"
	"runtime/debug"
)

// clientGCPercent is aaa-peer client's garbage collection target (see
// tuneClientGC).
const clientGCPercent = 400

// tuneClientGC sets the collector's target to clientGCPercent unless the
// user chose one with $GOGC, and returns the way back. A load generator's
// live heap is small (the requests in flight and their answers, a few
// MB), while it allocates every request and answer anew: at the default
// of 100 a collection started each time the heap doubled, thousands a
// second at 256 callers, and marking, assists and sweeping took about a
// fifth of the client's CPU. At 400 the heap stays a few times the live
// data (tens of MB at 256 callers) and the collector runs a quarter as
// often.
func tuneClientGC(getenv func(string) string) (restore func()) {
	if getenv("GOGC") != "" {
		return func() {}
	}
	old := debug.SetGCPercent(clientGCPercent)
	return func() { debug.SetGCPercent(old) }
}

// tuneClientGCFromEnv is tuneClientGC of the process environment.
func tuneClientGCFromEnv() func() { return tuneClientGC(os.Getenv) }
