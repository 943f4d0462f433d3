package peer

import (
	"log/slog"

	"github.com/aaatp/aaatp/wire"
)

// backlog counts, for one connection, the requests read from the peer and
// not yet answered on the wire: those in a Handler, and the answers queued
// or being written. The reader stops reading while it is at the limit, so a
// peer that pipelines requests and never reads its answers meets TCP flow
// control instead of growing our memory and goroutines without bound.
//
// Only answers count, never our own requests: two peers that both waited
// on the other's requests before reading answers could deadlock. All
// answers on a connection answer the peer's requests (DWA, DPA, error
// answers, the Handler's). Fields are guarded by conn.wmu.
type backlog struct {
	limit     int
	inHandler int           // requests handed to a Handler, not answered yet
	queued    int           // answers in wq
	writing   int           // answers in the batch the writer is writing
	resume    chan struct{} // closed when the reader may read again; nil if it is not waiting
	pauses    uint64
}

func (b *backlog) full() bool { return b.inHandler+b.queued+b.writing >= b.limit }

func isAnswer(msg []byte) bool { return len(msg) > 4 && msg[4]&wire.FlagRequest == 0 }

// wakeLocked lets a waiting reader go on once there is room. c.wmu is held.
func (c *conn) wakeLocked() {
	if c.bp.resume != nil && !c.bp.full() {
		close(c.bp.resume)
		c.bp.resume = nil
	}
}

// waitRoom blocks the reader while the backlog is full, until answers
// drain or the connection closes; it reports whether it blocked.
func (c *conn) waitRoom() (waited bool) {
	c.wmu.Lock()
	if !c.bp.full() || c.wclosed {
		c.wmu.Unlock()
		return false
	}
	if len(c.wq) > 0 {
		c.kickLocked() // answers the reader queued without a writer
	}
	c.bp.pauses++
	ch := make(chan struct{})
	c.bp.resume = ch
	n := c.bp.inHandler + c.bp.queued + c.bp.writing
	c.wmu.Unlock()
	p := c.p
	p.stats.paused.Add(1)
	logLimited(p.cfg.Logger, slog.LevelWarn, logPaused, "reading paused: the peer's requests are not answered yet",
		"peer", p.Name(), "remote", c.tc.RemoteAddr().String(), "unanswered", n, "limit", c.bp.limit)
	select {
	case <-ch:
	case <-c.closed:
	}
	return true
}

// held marks one request handed to a Handler.
func (c *conn) held() {
	c.wmu.Lock()
	c.bp.inHandler++
	c.wmu.Unlock()
}

// unheld is for a Handler that returned no answer.
func (c *conn) unheld() {
	c.wmu.Lock()
	c.bp.inHandler--
	c.wakeLocked()
	c.wmu.Unlock()
}

// enqueueAnswer queues a Handler's answer: it stays in the backlog until
// written. The answer to the only request in a Handler, when nothing is
// queued or being written, is written by the Handler's goroutine (as
// enqueueLone writes a DWA): one caller's round trip then costs no writer
// goroutine on this side either. Answers that have company go to the
// writer, which batches them. With more, the reader has the next requests
// buffered already: the answer is queued without waking a writer, which
// the reader does once their answers are queued too.
func (c *conn) enqueueAnswer(ans []byte, more bool) error {
	c.wmu.Lock()
	c.bp.inHandler--
	if c.wclosed {
		c.wmu.Unlock()
		return ErrConnectionLost
	}
	if more {
		c.wq = append(c.wq, ans)
		c.bp.queued++
		c.wmu.Unlock()
		return nil
	}
	if c.bp.inHandler == 0 && c.inlineLocked() {
		c.wmu.Unlock()
		c.writeInline(ans)
		return nil
	}
	c.wq = append(c.wq, ans)
	c.bp.queued++
	c.kickLocked()
	c.wmu.Unlock()
	return nil
}
