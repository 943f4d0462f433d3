package main

import (
	"context"
	"sync/atomic"
	"time"
)

// maxDeadlineSlice bounds how much later than --timeout a request's
// deadline may fall (deadlines).
const maxDeadlineSlice = 10 * time.Millisecond

// deadlines hands out the contexts of the requests: cancelled with their
// parent, done timeout after the request's start. The requests started
// within one slice of time (a hundredth of timeout, at most
// maxDeadlineSlice) share one context, whose deadline is timeout after the
// slice's end: a request's deadline falls between timeout and timeout plus
// a slice after its start, never earlier. So a request costs no context,
// no timer and no registration with the parent of its own (a
// context.WithTimeout per request was an eighth of the client's CPU at 256
// callers); what is left is one context per slice, cancelled once a later
// slice replaced it and its last request is done (release), or at its
// deadline, or at close. Kept to its deadline instead, every slice of the
// last timeout (7,400 at the default 74 s) held its context, timer and
// place in the parent's children: the client's heap grew for the whole
// first timeout of a run. Safe for concurrent use.
type deadlines struct {
	parent  context.Context // cancelled by close: every slice's context ends
	close   context.CancelFunc
	timeout time.Duration
	slice   time.Duration
	cur     atomic.Pointer[sliceCtx]
}

// sliceCtx is the context of the requests started before end.
type sliceCtx struct {
	ctx    context.Context
	cancel context.CancelFunc
	end    time.Time
	// users counts the requests holding the slice, plus sealed once a
	// later slice replaced it: the count reaching zero when sealed
	// cancels ctx.
	users atomic.Int64
}

// sealed is added to a slice's users when it is no longer current.
const sealed = 1 << 40

// newDeadlines returns the deadlines of requests of timeout under parent;
// call close once every request is done.
func newDeadlines(parent context.Context, timeout time.Duration) *deadlines {
	slice := min(timeout/100, maxDeadlineSlice)
	if slice <= 0 {
		slice = 1 // a timeout under 100 ns: a context per request
	}
	ctx, cancel := context.WithCancel(parent)
	return &deadlines{parent: ctx, close: cancel, timeout: timeout, slice: slice}
}

// at returns the slice of a request started at now: its context is
// s.ctx; call s.release once the request is done.
func (d *deadlines) at(now time.Time) *sliceCtx {
	for {
		cur := d.cur.Load()
		if cur != nil && now.Before(cur.end) {
			if cur.users.Add(1)&sealed == 0 {
				return cur
			}
			cur.release() // replaced meanwhile: take the new one
			continue
		}
		end := now.Truncate(d.slice).Add(d.slice)
		ctx, cancel := context.WithDeadline(d.parent, end.Add(d.timeout))
		next := &sliceCtx{ctx: ctx, cancel: cancel, end: end}
		next.users.Store(1)
		if d.cur.CompareAndSwap(cur, next) {
			if cur != nil && cur.users.Add(sealed) == sealed {
				cur.cancel() // none of its requests is left
			}
			return next
		}
		cancel() // another caller opened the slice first: use theirs
	}
}

// release says a request of s is done.
func (s *sliceCtx) release() {
	if s.users.Add(-1) == sealed {
		s.cancel()
	}
}
