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

// The idle timeout replaces the opening timeout as soon as a request is
// admitted, whichever comes first: the reader re-arming after the request
// or the writer after its answer. With MaxUnanswered 1 the reader waits
// for the answer to be written, so the writer arms first; before, the
// opening deadline (a minute away, later than the idle one) was taken for
// a recent idle deadline and kept, and a client dribbling its second
// request kept its connection for that minute.
func TestServerIdleTimeoutReplacesTheOpeningTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = 2 * time.Second
		s, ln := startServer(t, ServerConfig{MaxUnanswered: 1, OpeningTimeout: time.Minute, IdleTimeout: idle,
			Logger: slog.New(slog.DiscardHandler)})
		c := connect(t, ln)
		go io.Copy(io.Discard, c.conn)
		c.send(accessReq("alice"), 1)
		synctest.Wait()
		require.Equal(t, uint64(1), s.Stats().Answered)
		_, err := c.conn.Write([]byte{byte(lradius.CodeAccessRequest), 2, 0})
		require.NoError(t, err)
		time.Sleep(idle + time.Millisecond)
		synctest.Wait()
		assert.True(t, c.closedByServer(), "no whole request for IdleTimeout after the first answer: closed")
		assert.Equal(t, uint64(1), s.Stats().TimedOut)
		mustClose(t, s)
	})
}
