package peer

import (
	"log/slog"

	"github.com/aaatp/aaatp/internal/serve"
)

// waitRoom blocks the reader while the backlog is full, until answers
// drain or the connection closes; it reports whether it blocked.
func (c *conn) waitRoom() (waited bool) {
	return c.out.WaitRoom(c.closed, func(n int) {
		p := c.p
		p.stats.paused.Add(1)
		p.logLimited(slog.LevelWarn, serve.KindPaused, "reading paused: the peer's requests are not answered yet",
			"peer", p.Name(), "remote", c.tc.RemoteAddr().String(), "unanswered", n, "limit", c.bp.Limit)
	})
}
