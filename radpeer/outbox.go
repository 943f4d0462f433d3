package radpeer

import (
	"runtime"
	"sync"

	"github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/transport"
)

// outbox is a connection's write queue. A writer goroutine runs only
// while something is queued, and writes whatever callers queued meanwhile
// in one WriteMessages (one writev on TCP): an idle connection costs no
// writer, a busy one batches.
//
// A server's outbox also keeps the connection's backlog (bp): the
// requests read and not answered on the wire, which its reader waits on
// at the bound. A client's has none (bp nil).
type outbox struct {
	tc      transport.Conn
	onError func(error) // called once, by the writer, when a write fails
	bp      *serve.Backlog
	// idle, when set, is called with mu held whenever the backlog
	// empties: the server arms its idle timeout then.
	idle func()
	// base is the backlog's own limit, and acct counts the
	// Accounting-Requests held (see held); acct is guarded by mu.
	base, acct int

	mu      sync.Mutex // guards the fields below and *bp
	q       [][]byte
	spare   [][]byte
	writing bool
	closed  bool
	wg      sync.WaitGroup
}

// send queues msgs; false if the outbox is closed.
func (o *outbox) send(msgs ...[]byte) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.queueLocked(msgs...)
}

func (o *outbox) queueLocked(msgs ...[]byte) bool {
	if o.closed {
		return false
	}
	o.q = append(o.q, msgs...)
	if !o.writing {
		o.writing = true
		o.wg.Add(1)
		go o.write()
	}
	return true
}

// held counts a request read and not answered yet; acct says it is an
// Accounting-Request. Accounting may hold half of the backlog's bound:
// past that half, the records waiting for a slow store do not count
// against it, so that they never stop the reading of the Access-Requests
// behind them. Their own number is bounded by their handlers' lane,
// which drops what it cannot queue.
func (o *outbox) held(acct bool) {
	o.mu.Lock()
	o.bp.InHandler++
	if acct {
		o.acctLocked(1)
	}
	o.mu.Unlock()
}

// acctLocked counts d more Accounting-Requests held. o.mu is held.
func (o *outbox) acctLocked(d int) {
	o.acct += d
	o.bp.Limit = o.base + max(0, o.acct-o.base/2)
}

// unheld is for a request counted by held that gets no answer.
func (o *outbox) unheld(acct bool) {
	o.mu.Lock()
	o.bp.InHandler--
	if acct {
		o.acctLocked(-1)
	}
	o.drainedLocked()
	o.mu.Unlock()
}

// drainedLocked follows a fall of the backlog: a paused reader may go on,
// and an empty backlog arms the idle timeout. o.mu is held.
func (o *outbox) drainedLocked() {
	o.bp.Wake()
	if o.idle != nil && o.bp.Unanswered() == 0 {
		o.idle()
	}
}

// answer queues the answer to a request counted by held; false if the
// outbox is closed.
func (o *outbox) answer(ans []byte, acct bool) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.bp.InHandler--
	if acct {
		o.acctLocked(-1)
	}
	if !o.queueLocked(ans) {
		o.drainedLocked()
		return false
	}
	o.bp.Queued++
	return true
}

// waitRoom blocks the reader while the backlog is full, until answers
// drain or done closes; paused is called, without the lock, before it
// waits.
func (o *outbox) waitRoom(done <-chan struct{}, paused func(unanswered int)) {
	o.mu.Lock()
	if !o.bp.Full() || o.closed {
		o.mu.Unlock()
		return
	}
	ch := o.bp.Pause()
	n := o.bp.Unanswered()
	o.mu.Unlock()
	paused(n)
	select {
	case <-ch:
	case <-done:
	}
}

func (o *outbox) write() {
	defer o.wg.Done()
	for {
		runtime.Gosched() // let callers that are runnable now join the batch
		o.mu.Lock()
		batch := o.q
		if len(batch) == 0 || o.closed {
			o.writing = false
			o.mu.Unlock()
			return
		}
		o.q, o.spare = o.spare[:0], nil
		if o.bp != nil {
			o.bp.Writing, o.bp.Queued = o.bp.Queued, 0
		}
		o.mu.Unlock()
		err := o.tc.WriteMessages(batch...)
		clear(batch)
		o.mu.Lock()
		o.spare = batch[:0]
		if o.bp != nil {
			o.bp.Writing = 0
			o.drainedLocked()
		}
		o.mu.Unlock()
		if err != nil {
			o.onError(err)
			return
		}
	}
}

// close stops the outbox (what is queued is dropped) and waits for the
// writer; the caller closes the transport first so a blocked write ends.
func (o *outbox) close() {
	o.mu.Lock()
	o.closed = true
	o.q = nil
	if o.bp != nil {
		o.bp.Queued = 0
		o.bp.Wake()
	}
	o.mu.Unlock()
	o.wg.Wait()
}
