package peer

import (
	"log/slog"

	"github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/wire"
)

func isAnswer(msg []byte) bool { return len(msg) > 4 && msg[4]&wire.FlagRequest == 0 }

// wakeLocked lets a waiting reader go on once there is room. c.wmu is held.
func (c *conn) wakeLocked() { c.bp.Wake() }

// waitRoom blocks the reader while the backlog is full, until answers
// drain or the connection closes; it reports whether it blocked.
func (c *conn) waitRoom() (waited bool) {
	c.wmu.Lock()
	if !c.bp.Full() || c.wclosed {
		c.wmu.Unlock()
		return false
	}
	if len(c.wq) > 0 {
		c.kickLocked() // answers the reader queued without a writer
	}
	ch := c.bp.Pause()
	n := c.bp.Unanswered()
	c.wmu.Unlock()
	p := c.p
	p.stats.paused.Add(1)
	serve.Log(p.cfg.Logger, slog.LevelWarn, serve.KindPaused, "reading paused: the peer's requests are not answered yet",
		"peer", p.Name(), "remote", c.tc.RemoteAddr().String(), "unanswered", n, "limit", c.bp.Limit)
	select {
	case <-ch:
	case <-c.closed:
	}
	return true
}

// held marks one request handed to a Handler.
func (c *conn) held() {
	c.wmu.Lock()
	c.bp.InHandler++
	c.wmu.Unlock()
}

// unheld is for a Handler that returned no answer.
func (c *conn) unheld() {
	c.wmu.Lock()
	c.bp.InHandler--
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
	c.bp.InHandler--
	if c.wclosed {
		c.wmu.Unlock()
		return ErrConnectionLost
	}
	if more {
		c.wq = append(c.wq, ans)
		c.bp.Queued++
		c.wmu.Unlock()
		return nil
	}
	if c.bp.InHandler == 0 && c.inlineLocked() {
		c.wmu.Unlock()
		c.writeInline(ans)
		return nil
	}
	c.wq = append(c.wq, ans)
	c.bp.Queued++
	c.kickLocked()
	c.wmu.Unlock()
	return nil
}
