package dedup

import (
	"sync/atomic"
	"time"
)

// clockTick is the resolution of the coarse clock: entries may be stamped
// up to about one tick early, which is nothing next to a max age of
// minutes and a mark TTL of seconds.
const clockTick = 10 * time.Millisecond

// Coarse clock states.
const (
	clockStopped = iota // no timer pending; the next read restarts it
	clockUsed           // read since the last tick
	clockIdle           // not read since the last tick
)

// coarseClock is a monotonic clock read with one atomic load. Reading the
// monotonic clock itself costs about 24 ns on the VMs the benchmarks run
// on, a tenth of a whole Begin; a store under load reads the clock millions
// of times a second, so a timer refreshes it every clockTick instead, but
// only while the store is used: after a tick without reads the timer stops,
// and the next read restarts it (reading the real clock once). An idle
// store thus costs no timer wake-ups and no goroutine.
//
// Times are nanoseconds since base, never decreasing.
type coarseClock struct {
	base  time.Time // with a monotonic reading
	ns    atomic.Int64
	state atomic.Uint32
	timer *time.Timer
}

func newCoarseClock(base time.Time) *coarseClock {
	c := &coarseClock{base: base}
	c.timer = time.AfterFunc(time.Hour, c.tick)
	c.timer.Stop()
	return c
}

// now returns the time of the last tick, or reads the real clock if the
// clock was not in use.
func (c *coarseClock) now() int64 {
	if c.state.Load() == clockUsed {
		return c.ns.Load()
	}
	return c.wake()
}

// exact reads the real clock and advances the coarse one to it; for the
// rare paths that sleep and must see their deadline passed on waking.
func (c *coarseClock) exact() int64 {
	t := int64(time.Since(c.base))
	c.advance(t)
	return t
}

// wake marks the clock used, restarting its timer if it had stopped, and
// returns the real time.
func (c *coarseClock) wake() int64 {
	t := c.exact()
	for {
		switch c.state.Load() {
		case clockUsed:
			return t
		case clockIdle:
			if c.state.CompareAndSwap(clockIdle, clockUsed) {
				return t
			}
		case clockStopped:
			if c.state.CompareAndSwap(clockStopped, clockUsed) {
				c.timer.Reset(clockTick)
				return t
			}
		}
	}
}

// advance moves the clock forward to t (never back: a reader that read
// the real clock may race a tick).
func (c *coarseClock) advance(t int64) {
	for {
		old := c.ns.Load()
		if t <= old || c.ns.CompareAndSwap(old, t) {
			return
		}
	}
}

// tick refreshes the clock and re-arms the timer, unless nothing read the
// clock during the last tick. Only tick and the reader that moves the
// state from clockStopped re-arm the timer, and never both for one stop,
// so the timer is never pending twice.
func (c *coarseClock) tick() {
	c.exact()
	if c.state.CompareAndSwap(clockUsed, clockIdle) {
		c.timer.Reset(clockTick)
		return
	}
	if c.state.CompareAndSwap(clockIdle, clockStopped) {
		return
	}
	// A reader moved the state from clockIdle to clockUsed in between:
	// keep ticking.
	c.timer.Reset(clockTick)
}

// stop stops the timer; a later read starts it again.
func (c *coarseClock) stop() {
	if c.timer.Stop() {
		c.state.Store(clockStopped)
	}
}
