// Package outbox is a connection's write queue, the one every stream
// carrier and stream server uses: a writer goroutine runs only while
// something is queued and writes whatever callers queued meanwhile in one
// WriteMessages (one writev on TCP), so an idle connection costs no
// writer and a busy one batches; a message that travels alone may be
// written by its caller's goroutine instead (Post).
//
// A server's outbox also keeps the connection's backlog (BP): the
// requests read and not answered on the wire, which its reader waits on
// at the bound. A client's has none, and no bound in bytes: what it
// queues are requests whose callers wait for them (a RADIUS connection's
// also hold one of its 256 Identifiers), and a batch the peer does not
// take within the transport's WriteTimeout fails the connection with all
// that is queued, so the queue holds at most what callers send in about
// two write timeouts.
package outbox

import (
	"runtime"
	"slices"
	"sync"

	"github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/internal/testhook"
	"github.com/aaatp/aaatp/transport"
)

// Outbox is one connection's write queue. Mu guards its state and *BP.
type Outbox struct {
	tc transport.Conn
	tw transport.TryWriter // nil: the transport cannot write without waiting
	// onEnd is called once, by the goroutine that wrote last, when a
	// write fails (err) or the connection is to close after its flush
	// (CloseAfterFlush, err nil).
	onEnd func(err error)
	BP    *serve.Backlog
	// Idle, when set, is called with Mu held whenever the backlog
	// empties: a server arms its idle timeout then.
	Idle func()
	// base is the backlog's own limit, and acct counts the
	// Accounting-Requests held (see Held).
	base, acct int

	Mu       sync.Mutex
	q, spare [][]byte // the two buffers never share an array
	writing  bool     // a writer goroutine or an inline write runs
	closed   bool
	flushEnd bool // after the queue drains, end (onEnd(nil))
	// tail: q[0] is the rest of a message an inline write began, which
	// must follow it on the wire (never withdrawn).
	tail bool
	// inline is the message of the inline write under way (nil when
	// none); forgo: if the transport takes none of it, it is not queued
	// for the writer (ForgoInline).
	inline  []byte
	forgo   bool
	wg      sync.WaitGroup
	Writers int // writer goroutines started (for tests)
	Inlined int // messages written inline, whole (for tests)
}

// Init makes o the outbox of tc; bp is its backlog (nil on a client).
func (o *Outbox) Init(tc transport.Conn, bp *serve.Backlog, onEnd func(error)) {
	o.tc, o.BP, o.onEnd = tc, bp, onEnd
	o.tw, _ = tc.(transport.TryWriter)
	if bp != nil {
		o.base = bp.Limit
	}
}

// Writing reports whether a writer or an inline write runs. o.Mu is held.
func (o *Outbox) Writing() bool { return o.writing }

// Inlines reports whether the transport can be written without waiting.
func (o *Outbox) Inlines() bool { return o.tw != nil }

// Send queues msgs, none of them an answer that counts in the backlog
// (requests); false if the outbox is closed.
func (o *Outbox) Send(msgs ...[]byte) bool {
	o.Mu.Lock()
	defer o.Mu.Unlock()
	return o.queueLocked(0, msgs...)
}

// Withdraw takes the queued messages drop reports true for out of the
// queue and returns how many it took: those not handed to the transport
// yet, which will never be written. A message being written is not
// queued any more, nor is the rest of one partly written. drop runs with o.Mu held; the messages are requests
// (nothing Withdraw takes counts in the backlog).
func (o *Outbox) Withdraw(drop func(msg []byte) bool) int {
	o.Mu.Lock()
	defer o.Mu.Unlock()
	q := o.q
	if o.tail {
		q = q[1:]
	}
	n := len(q)
	q = slices.DeleteFunc(q, drop) // zeroes what it frees
	taken := n - len(q)
	o.q = o.q[:len(o.q)-taken]
	return taken
}

// ForgoInline tells the inline write under way, if match reports true
// for its message, not to queue that message for the writer should the
// transport take none of it: it never reaches the wire then. Whether any
// of it did is not known yet, so the caller counts it as possibly
// written. match runs with o.Mu held; the message is a request.
func (o *Outbox) ForgoInline(match func(msg []byte) bool) {
	o.Mu.Lock()
	defer o.Mu.Unlock()
	if o.inline != nil && match(o.inline) {
		o.forgo = true
	}
}

// queueLocked queues msgs, of which answers count in the backlog, and
// starts a writer unless one runs. o.Mu is held.
func (o *Outbox) queueLocked(answers int, msgs ...[]byte) bool {
	if o.closed {
		return false
	}
	o.q = append(o.q, msgs...)
	if answers > 0 && o.BP != nil {
		o.BP.Queued += answers
	}
	o.kickLocked()
	return true
}

func (o *Outbox) kickLocked() {
	if !o.writing {
		o.writing = true
		o.Writers++
		o.wg.Add(1)
		go o.write()
	}
}

// Kick starts a writer for what is queued, unless one runs.
func (o *Outbox) Kick() {
	o.Mu.Lock()
	if !o.closed && len(o.q) > 0 {
		o.kickLocked()
	}
	o.Mu.Unlock()
}

// Post queues msg for the writer or, when alone and the connection is
// free (the transport writes without waiting, nothing is queued or being
// written, no end is due), writes it on the caller's goroutine; inline
// reports which. The caller is never blocked behind a full send buffer:
// what the socket did not take goes to the head of the queue for a
// writer, so two peers writing to each other do not deadlock. held, when
// not nil, is a lock the caller holds to keep msg's bookkeeping and its
// queueing together: Post releases it once msg is queued or the
// connection is taken for the write, so no write runs under it. An answer
// (the reader's DWA, a refusal) counts in a server's backlog until
// written. ok is false, held released too, if the outbox is closed.
func (o *Outbox) Post(msg []byte, alone, answer bool, held sync.Locker) (inline, ok bool) {
	if testhook.Posting != nil {
		testhook.Posting()
	}
	o.Mu.Lock()
	n := 0
	if answer {
		n = 1
	}
	if alone && !o.closed && o.inlineLocked() {
		inline, ok = true, true
		o.inline = msg
	} else {
		ok = o.queueLocked(n, msg)
	}
	o.Mu.Unlock()
	if held != nil {
		held.Unlock()
	}
	if inline {
		o.writeInline(msg, n)
	}
	return inline, ok
}

func (o *Outbox) inlineLocked() bool {
	if o.tw == nil || o.writing || len(o.q) > 0 || o.flushEnd {
		return false
	}
	o.writing = true
	return true
}

// writeInline writes msg, taken for an inline write, with one write that
// never waits; answers is 1 for an answer that counts in the backlog.
// A failed write ends the connection as the writer's does.
func (o *Outbox) writeInline(msg []byte, answers int) {
	n, err := o.tw.TryWrite(msg)
	if err != nil {
		// writing stays set, as after a writer's failed write: nothing
		// is written on this connection again, and onEnd runs once.
		o.Mu.Lock()
		o.inline = nil
		o.Mu.Unlock()
		o.onEnd(err)
		return
	}
	o.Mu.Lock()
	switch {
	case n == 0 && o.forgo: // nothing of it went out: it never will
	case n < len(msg):
		o.q = slices.Insert(o.q, 0, msg[n:])
		o.tail = n > 0
		if answers > 0 && o.BP != nil {
			o.BP.Queued += answers
		}
	default:
		o.Inlined++
	}
	o.inline, o.forgo = nil, false
	o.writing = false
	o.drainedLocked() // an answer written whole leaves the backlog
	if !o.closed && (len(o.q) > 0 || o.flushEnd) {
		o.kickLocked()
	}
	o.Mu.Unlock()
}

// Held counts a request read and not answered yet; acct says it is an
// Accounting-Request. Accounting may hold half of the backlog's bound:
// past that half, the records waiting for a slow store do not count
// against it, so that they never stop the reading of the requests behind
// them. Their own number is bounded by their handlers' lane, which drops
// what it cannot queue.
func (o *Outbox) Held(acct bool) {
	o.Mu.Lock()
	o.BP.InHandler++
	if acct {
		o.acctLocked(1)
	}
	o.Mu.Unlock()
}

func (o *Outbox) acctLocked(d int) {
	o.acct += d
	o.BP.Limit = o.base + max(0, o.acct-o.base/2)
}

// Unheld is for a request counted by Held that gets no answer.
func (o *Outbox) Unheld(acct bool) {
	o.Mu.Lock()
	o.unheldLocked(acct)
	o.drainedLocked()
	o.Mu.Unlock()
}

func (o *Outbox) unheldLocked(acct bool) {
	o.BP.InHandler--
	if acct {
		o.acctLocked(-1)
	}
}

// drainedLocked follows a fall of the backlog: a paused reader may go on,
// and an empty backlog arms the idle timeout. o.Mu is held.
func (o *Outbox) drainedLocked() {
	if o.BP == nil {
		return
	}
	o.BP.Wake()
	if o.Idle != nil && o.BP.Unanswered() == 0 {
		o.Idle()
	}
}

// Answer queues the answer to a request counted by Held; false if the
// outbox is closed. With more, the reader has the next requests buffered
// already: it is queued without a writer, which the reader kicks once
// their answers are queued too. With inline, the answer to the only
// request held is written by the caller when the connection is free.
func (o *Outbox) Answer(ans []byte, acct, more, inline bool) bool {
	o.Mu.Lock()
	o.unheldLocked(acct)
	switch {
	case o.closed:
		o.drainedLocked()
		o.Mu.Unlock()
		return false
	case more:
		o.q = append(o.q, ans)
		o.BP.Queued++
	case inline && o.BP.InHandler == 0 && o.inlineLocked():
		o.Mu.Unlock()
		o.writeInline(ans, 1)
		return true
	default:
		o.queueLocked(1, ans)
	}
	o.Mu.Unlock()
	return true
}

// WaitRoom blocks the reader while the backlog is full, until answers
// drain or done closes; paused is called, without the lock, before it
// waits. It reports whether it waited.
func (o *Outbox) WaitRoom(done <-chan struct{}, paused func(unanswered int)) bool {
	o.Mu.Lock()
	if !o.BP.Full() || o.closed {
		o.Mu.Unlock()
		return false
	}
	if len(o.q) > 0 {
		o.kickLocked() // answers the reader queued without a writer
	}
	ch := o.BP.Pause()
	n := o.BP.Unanswered()
	o.Mu.Unlock()
	paused(n)
	select {
	case <-ch:
	case <-done:
	}
	return true
}

// write flushes the queue in batches. Yielding once before taking the
// batch lets callers that are runnable right now add their message to it.
func (o *Outbox) write() {
	defer o.wg.Done()
	for {
		runtime.Gosched()
		o.Mu.Lock()
		batch, end := o.q, o.flushEnd
		if len(batch) == 0 && !end || o.closed {
			o.writing = false
			o.Mu.Unlock()
			return
		}
		o.q, o.spare, o.tail = o.spare[:0], nil, false
		if o.BP != nil {
			o.BP.Writing, o.BP.Queued = o.BP.Queued, 0
		}
		o.Mu.Unlock()
		err := o.tc.WriteMessages(batch...)
		clear(batch)
		o.Mu.Lock()
		o.spare = batch[:0]
		if o.BP != nil {
			o.BP.Writing = 0
			o.drainedLocked()
		}
		o.Mu.Unlock()
		if err != nil || end {
			o.onEnd(err)
			return
		}
	}
}

// CloseAfterFlush ends the connection (onEnd(nil)) once everything
// queued so far is written.
func (o *Outbox) CloseAfterFlush() {
	o.Mu.Lock()
	defer o.Mu.Unlock()
	o.flushEnd = true
	if !o.closed {
		o.kickLocked()
	}
}

// Close stops the outbox: what is queued is dropped, nothing more is
// taken. With wait it waits for the writer; the caller closes the
// transport first so that a blocked write ends.
func (o *Outbox) Close(wait bool) {
	o.Mu.Lock()
	o.closed = true
	o.q, o.tail = nil, false
	if o.BP != nil {
		o.BP.Queued = 0
		o.BP.Wake()
	}
	o.Mu.Unlock()
	if wait {
		o.wg.Wait()
	}
}
