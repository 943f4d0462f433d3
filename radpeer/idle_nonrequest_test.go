package radpeer

import (
	"io"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/radius"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	lradius "layeh.com/radius"
)

// An admitted connection that sends only packets that are not requests
// (an Access-Accept: no secret needed, dropped and counted) sends no
// whole request: IdleTimeout closes it, from its last request, as it
// closes one that sends nothing. Before, every packet read re-armed the
// idle deadline, so such a client kept its connection forever.
func TestServerIdleTimeoutIgnoresNonRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, ln := startServer(t, ServerConfig{IdleTimeout: 30 * time.Second, Logger: slog.New(slog.DiscardHandler)})
		c := connect(t, ln)
		go io.Copy(io.Discard, c.conn)
		c.send(accessReq("alice"), 1)
		synctest.Wait()
		b, _, err := radius.EncodeRequest(accessReq("alice"), 2, testSecret)
		require.NoError(t, err)
		b[0] = byte(lradius.CodeAccessAccept)
		for range 5 {
			time.Sleep(10 * time.Second)
			if c.closedByServer() {
				break
			}
			c.conn.SetWriteDeadline(time.Time{})
			if _, err := c.conn.Write(b); err != nil {
				break
			}
			synctest.Wait()
		}
		synctest.Wait()
		assert.True(t, c.closedByServer(), "no whole request for IdleTimeout: closed, whatever else it sent")
		assert.Equal(t, uint64(1), s.Stats().TimedOut)
		assert.GreaterOrEqual(t, s.Stats().Dropped, uint64(2), "the packets that are not requests are counted")
		mustClose(t, s)
	})
}
