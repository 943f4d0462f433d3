package transport

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fewer bytes than a header are never a whole message, whatever their
// length field says: ReadMessage waits for the rest of the header before
// it can report the frame bad, so a reader trusting MessageBuffered would
// wait on the network with answers left unsent.
func TestMessageBufferedNeedsAWholeHeader(t *testing.T) {
	a := testMsg(64, 271, 1)
	short := []byte{1, 0, 0, 8, 0, 0, 0, 0, 0, 0} // a length of 8: too short to be valid, and half a header
	check := func(t *testing.T, c Conn, write func([]byte) (int, error), closeWriter func()) {
		br := c.(BufferedReader)
		go write(append(append([]byte(nil), a...), short...)) // one write: both arrive together
		m, err := c.ReadMessage()
		require.NoError(t, err)
		require.Equal(t, a, m)
		assert.False(t, br.MessageBuffered(), "half a header is not a whole message")
		closeWriter()
		_, err = c.ReadMessage()
		assert.Error(t, err)
	}
	t.Run("tcp", func(t *testing.T) {
		c, w := rawPair(t, listenLoopback(t), Options{})
		check(t, c, w.Write, func() { w.Close() })
	})
	t.Run("pipe", func(t *testing.T) {
		x, y := net.Pipe()
		defer x.Close()
		check(t, NewStreamConn(x, "pipe", Options{}), y.Write, func() { y.Close() })
	})
}
