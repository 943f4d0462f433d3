package dedup

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestCoarseClockTicksOnlyWhileUsed drives the coarse clock in a synctest
// bubble: a read of a stopped clock returns the exact time and starts the
// timer, reads while it ticks lag by less than a tick, and a tick without
// reads stops it.
func TestCoarseClockTicksOnlyWhileUsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		c := newCoarseClock(start)
		elapsed := func() int64 { return int64(time.Since(start)) }
		lagOK := func(got int64) {
			t.Helper()
			if now := elapsed(); got > now || got <= now-int64(clockTick) {
				t.Fatalf("clock read %v at %v: want within one tick (%v) before", time.Duration(got), time.Duration(now), clockTick)
			}
		}

		if got := c.now(); got != 0 {
			t.Fatalf("first read = %v, want 0", got)
		}
		if st := c.state.Load(); st != clockUsed {
			t.Fatalf("state after a read = %d, want clockUsed", st)
		}
		time.Sleep(clockTick / 2)
		if got := c.now(); got != 0 {
			t.Fatalf("read half a tick later = %v, want the last tick's 0", time.Duration(got))
		}
		for range 5 {
			time.Sleep(clockTick * 3 / 4)
			lagOK(c.now())
		}

		// No reads: one tick marks it idle, the next stops it.
		time.Sleep(3 * clockTick)
		synctest.Wait()
		if st := c.state.Load(); st != clockStopped {
			t.Fatalf("state after 3 ticks without reads = %d, want clockStopped", st)
		}
		at := elapsed()
		if got := c.now(); got != at {
			t.Fatalf("read of a stopped clock = %v, want the exact %v", time.Duration(got), time.Duration(at))
		}
		time.Sleep(clockTick + 1)
		lagOK(c.now())

		c.stop()
		if st := c.state.Load(); st != clockStopped {
			t.Fatalf("state after stop = %d, want clockStopped", st)
		}
	})
}

// TestCoarseClockNeverGoesBack: exact reads and ticks race; the clock
// only moves forward.
func TestCoarseClockNeverGoesBack(t *testing.T) {
	c := newCoarseClock(time.Now())
	defer c.stop()
	c.advance(100)
	c.advance(50)
	if got := c.ns.Load(); got != 100 {
		t.Fatalf("advance(50) after advance(100) left %d, want 100", got)
	}
	last := int64(0)
	for range 10000 {
		got := c.now()
		if got < last {
			t.Fatalf("clock went back from %d to %d", last, got)
		}
		last = got
	}
}

// TestMemoryDefaultClockExpires: with the default (coarse) clock, entries
// expire at their max age and in-flight marks at their TTL, to within a
// tick; in a synctest bubble so that the times are exact.
func TestMemoryDefaultClockExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := NewMemory(WithMaxAge(time.Second), WithMarkTTL(200*time.Millisecond))
		defer m.Close()
		k, k2 := benchKey(1), benchKey(2)
		o, err := m.Begin(ctx, k)
		if err != nil || !o.First() {
			t.Fatal(err, kindOf(o))
		}
		if err := o.Complete(benchAnswer); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second - 2*clockTick)
		if d, err := m.Begin(ctx, k); err != nil || !d.Duplicate() {
			t.Fatalf("before max age: %v %v, want Duplicate", err, d.Kind())
		}
		time.Sleep(3 * clockTick)
		if f, err := m.Begin(ctx, k); err != nil || !f.First() {
			t.Fatalf("after max age: %v %v, want First", err, f.Kind())
		}

		// A duplicate of a request in flight waits for the mark's TTL,
		// then owns the request.
		if f, err := m.Begin(ctx, k2); err != nil || !f.First() {
			t.Fatal(err)
		}
		t0 := time.Now()
		f, err := m.Begin(ctx, k2)
		if err != nil || !f.First() {
			t.Fatalf("after the mark expired: %v, want First", err)
		}
		if waited := time.Since(t0); waited < 200*time.Millisecond-clockTick || waited > 200*time.Millisecond+clockTick {
			t.Fatalf("waited %v for a 200ms mark", waited)
		}
	})
}
