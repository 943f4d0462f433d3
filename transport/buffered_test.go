package transport

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// MessageBuffered tells whether the next message was received whole
// already: over TCP (raw framing) and over a pipe (the buffered reader).
func TestMessageBuffered(t *testing.T) {
	a, b, c3 := testMsg(64, 271, 1), testMsg(100, 271, 2), testMsg(80, 271, 3)
	check := func(t *testing.T, c Conn, write func([]byte) (int, error)) {
		br, ok := c.(BufferedReader)
		require.True(t, ok)
		assert.False(t, br.MessageBuffered())
		go write(append(append(append([]byte(nil), a...), b...), c3[:30]...)) // one write: all arrive together
		m, err := c.ReadMessage()
		require.NoError(t, err)
		require.Equal(t, a, m)
		assert.True(t, br.MessageBuffered(), "the second message is here whole")
		m, err = c.ReadMessage()
		require.NoError(t, err)
		require.Equal(t, b, m)
		assert.False(t, br.MessageBuffered(), "only part of the third is here")
		go write(c3[30:])
		m, err = c.ReadMessage()
		require.NoError(t, err)
		require.Equal(t, c3, m)
		assert.False(t, br.MessageBuffered())
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
