package transport

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Buffered tells what was received and not yet returned: over TCP (raw
// framing) and over a pipe (the buffered reader).
func TestBufferedCountsWhatIsUnread(t *testing.T) {
	a, b := testMsg(64, 271, 1), testMsg(100, 271, 2)
	check := func(t *testing.T, c Conn, write func([]byte) (int, error)) {
		br, ok := c.(BufferedReader)
		require.True(t, ok)
		assert.Zero(t, br.Buffered())
		go write(append(append([]byte(nil), a...), b...)) // one write: both arrive together
		m, err := c.ReadMessage()
		require.NoError(t, err)
		require.Equal(t, a, m)
		assert.Equal(t, len(b), br.Buffered(), "the second message is already here")
		m, err = c.ReadMessage()
		require.NoError(t, err)
		require.Equal(t, b, m)
		assert.Zero(t, br.Buffered())
	}
	t.Run("tcp", func(t *testing.T) {
		c, w := rawPair(t, listenLoopback(t), Options{})
		check(t, c, w.Write)
	})
	t.Run("pipe", func(t *testing.T) {
		x, y := net.Pipe()
		defer x.Close()
		defer y.Close()
		check(t, NewStreamConn(x, "pipe", Options{}), y.Write)
	})
}
