package call

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// blockReader: the first ReadAnswer reads "the socket" until Interrupt
// (a backstop of 3 s stands for the next message on a quiet
// connection); any later one finds the baton taken and returns at once.
type blockReader struct {
	c          *Call
	n, active  atomic.Int32
	maxActive  atomic.Int32
	interrupts atomic.Int32
	stop       chan struct{}
	entered    chan struct{}
}

func (r *blockReader) Lifecycle() *Call { return r.c }
func (r *blockReader) ReadAnswer() {
	a := r.active.Add(1)
	defer r.active.Add(-1)
	if a > r.maxActive.Load() {
		r.maxActive.Store(a)
	}
	if r.n.Add(1) == 1 {
		close(r.entered)
		select {
		case <-r.stop:
		case <-time.After(3 * time.Second):
		}
	}
}
func (r *blockReader) Interrupt() {
	if r.interrupts.Add(1) == 1 {
		close(r.stop)
	}
}

// Two Awaits of one call run one ReadAnswer at a time: a second one,
// returning while the first reads, cleared the mark of the read under
// it, and then neither the deadline nor the completion interrupted the
// first, whose Await outlived its 50 ms until the next message (here a
// backstop of 3 s).
func TestConcurrentAwaitsOneReadAtATime(t *testing.T) {
	c := newCall()
	r := &blockReader{c: c, stop: make(chan struct{}), entered: make(chan struct{})}
	c.Proto = r
	cn := newConn("a")
	boarded(t, c, cn)

	first := make(chan time.Duration, 1)
	start := time.Now()
	go func() {
		c.Await(context.Background(), 50*time.Millisecond)
		first <- time.Since(start)
	}()
	<-r.entered
	c.Await(context.Background(), 50*time.Millisecond) // the second waiter
	d := <-first
	t.Logf("ReadAnswer ran %d times, at most %d at once; %d interrupts; first Await returned after %v",
		r.n.Load(), r.maxActive.Load(), r.interrupts.Load(), d)
	if r.maxActive.Load() > 1 {
		t.Errorf("two ReadAnswer ran at once")
	}
	if d > time.Second {
		t.Errorf("first Await returned after %v, its timeout was 50ms", d)
	}
}
