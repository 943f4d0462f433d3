package call

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// A watch ends the calls waiting under one context when it is done. The
// calls of a context share it: a dispatcher gives many requests the same
// context (a load generator's deadline slice, a server's lifetime), and a
// select of each waiter on that context's Done channel made every Wait
// take and release the one channel's lock twice, beside a channel of its
// own per call. A call waiting under the context joins the watch's list
// and leaves it when it is woken; the context's end fails those still on
// it (one context.AfterFunc per watch, not per call).
type watch struct {
	done <-chan struct{} // the context's: what identifies it
	ctx  context.Context
	stop func() bool // the AfterFunc's

	mu      sync.Mutex
	head    *Call // the waiting calls, linked through wprev, wnext
	n       int   // len of the list
	err     error // the context ended: what its calls fail with
	evicted bool  // no longer recent: stopped once its list is empty
}

// recent is the watch of the context a call waited under last. One slot:
// the contexts that many requests share are few and long-lived; a
// context per request makes a watch per request, as cheap as an
// AfterFunc per call, and evicts the previous one.
var recent atomic.Pointer[watch]

// watchFor adds c to the watch of ctx, whose Done channel is done, and
// returns it; once c is woken, remove takes it off. If ctx has ended
// already it returns the error c fails with.
func watchFor(ctx context.Context, done <-chan struct{}, c *Call) (*watch, error) {
	for {
		w := recent.Load()
		if w == nil || w.done != done {
			nw := &watch{done: done, ctx: ctx}
			nw.stop = context.AfterFunc(ctx, nw.fire)
			if !recent.CompareAndSwap(w, nw) {
				nw.retire()
				continue
			}
			if w != nil {
				w.retire()
			}
			w = nw
		}
		if ok, err := w.add(c); ok {
			return w, err
		}
		// evicted between Load and add: take the new one
	}
}

// add links c into w; false if w was evicted (use another). err is not
// nil when the context has ended: c was not linked.
func (w *watch) add(c *Call) (ok bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.err != nil:
		return true, w.err
	case w.evicted:
		return false, nil
	}
	c.wprev, c.wnext = nil, w.head
	if w.head != nil {
		w.head.wprev = c
	}
	w.head = c
	w.n++
	return true, nil
}

// remove unlinks c, which add linked (a no-op if fire took it off), and
// stops an evicted watch left with no call.
func (w *watch) remove(c *Call) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.wprev == nil && w.head != c {
		return // fire unlinked it
	}
	w.unlinkLocked(c)
	if w.n == 0 && w.evicted {
		w.stop()
	}
}

func (w *watch) unlinkLocked(c *Call) {
	if c.wprev != nil {
		c.wprev.wnext = c.wnext
	} else {
		w.head = c.wnext
	}
	if c.wnext != nil {
		c.wnext.wprev = c.wprev
	}
	c.wprev, c.wnext = nil, nil
	w.n--
}

// retire marks w no longer recent: the last call to leave stops it, so
// that a context that lives on (never cancelled) does not keep it.
func (w *watch) retire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.evicted = true
	if w.n == 0 {
		w.stop()
	}
}

// fire runs when the context ends: every call still waiting fails with
// ErrTimeout and the context's error (each Wait ends its call), and so
// does every later add.
func (w *watch) fire() {
	recent.CompareAndSwap(w, nil) // so that an ended context is not kept
	w.mu.Lock()
	w.err = fmt.Errorf("%w: %w", ErrTimeout, w.ctx.Err())
	var calls []*Call
	for w.head != nil {
		c := w.head
		w.unlinkLocked(c)
		calls = append(calls, c)
	}
	err := w.err
	w.mu.Unlock()
	for _, c := range calls {
		c.cutShort(err) // its Wait ends it
	}
}
