package main

// This file: the demo's script: what happens when, and the waits between.

import (
	"context"
	"fmt"
	"time"

	"github.com/aaatp/aaatp/watchdog"
)

// script freezes server2, resets server3 and thaws server2 as the
// client's watchdog sees them, then ends the run (stop) once both are
// back in service.
func (d *demo) script(ctx context.Context, stop func()) {
	defer stop()
	frozen, reset := d.servers[demoFrozen], d.servers[demoReset]
	pf, pr := d.gen.peers[demoFrozen], d.gen.peers[demoReset]
	if !sleepCtx(ctx, d.o.freezeAt) {
		return
	}
	frozen.freeze()
	d.tl.note(frozen.name, "frozen (stops reading and writing: no answers, no DWAs; the kernel keeps buffering)")
	if !waitFor(ctx, func() bool { return pf.State() != watchdog.Okay }) {
		return
	}
	if !sleepCtx(ctx, demoResetAfterSuspect) {
		return
	}
	d.tl.note(reset.name, fmt.Sprintf("crashing: still applies what it reads, but its answers are lost; reset in %v", demoCrashWindow))
	reset.mute()
	sleepCtx(ctx, demoCrashWindow) // reset even when interrupted
	n := reset.faults.Conns()
	d.tl.note(reset.name, fmt.Sprintf("reset: %d connection(s) closed abruptly (RST), as a crash would; still listening", n))
	reset.reset()
	if !waitFor(ctx, func() bool { return pf.State() == watchdog.Down }) {
		return
	}
	if !sleepCtx(ctx, demoThawAfterDown) {
		return
	}
	buffered, dropped := frozen.thaw()
	switch {
	case dropped > 0:
		d.tl.note(frozen.name, fmt.Sprintf("thawed; it had given its connection up meanwhile: %d buffered requests dropped", buffered))
	case buffered > 0:
		d.tl.note(frozen.name, fmt.Sprintf("thawed; reads the %d requests buffered meanwhile (failed over already; the client has closed this connection)", buffered))
	default:
		d.tl.note(frozen.name, "thawed")
	}
	if !waitFor(ctx, func() bool { return pf.State() == watchdog.Okay && pr.State() == watchdog.Okay }) {
		return
	}
	sleepCtx(ctx, 5*demoPoll) // let the timeline print the transition first
	d.tl.note("", "every server is back in service; stopping the traffic in "+demoTail.String())
	sleepCtx(ctx, demoTail)
}

func sleepCtx(ctx context.Context, dur time.Duration) bool {
	t := time.NewTimer(dur)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// waitFor polls cond until it holds (true) or ctx ends (false).
func waitFor(ctx context.Context, cond func() bool) bool {
	t := time.NewTicker(demoPoll)
	defer t.Stop()
	for !cond() {
		select {
		case <-t.C:
		case <-ctx.Done():
			return false
		}
	}
	return true
}
