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
// callers); what is left is one context per slice, which ends by itself at
// its deadline, or at close. Safe for concurrent use.
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
	cancel context.CancelFunc // unused: close cancels every slice at once
	end    time.Time
}

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

// at returns the context of a request started at now.
func (d *deadlines) at(now time.Time) context.Context {
	for {
		cur := d.cur.Load()
		if cur != nil && now.Before(cur.end) {
			return cur.ctx
		}
		end := now.Truncate(d.slice).Add(d.slice)
		// A slice's context ends at its deadline (its timer fires) or
		// at close, when every request is done.
		ctx, cancel := context.WithDeadline(d.parent, end.Add(d.timeout))
		next := &sliceCtx{ctx: ctx, cancel: cancel, end: end}
		if d.cur.CompareAndSwap(cur, next) {
			return ctx
		}
		cancel() // another caller opened the slice first: use theirs
	}
}
