//go:build unix

package transport

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/internal/testhelp"
)

// Plain TCP writes without waiting; TLS does not offer it.
func TestTryWriteOnlyOnPlainTCP(t *testing.T) {
	srv, cli := pair(t, "tcp://127.0.0.1:0", Options{}, Options{})
	_, ok := cli.(TryWriter)
	assert.True(t, ok, "dialed TCP")
	_, ok = srv.(TryWriter)
	assert.True(t, ok, "accepted TCP")

	p := testhelp.NewPKI(t)
	srvTLS, err := ServerTLSConfig(p.ServerCert, p.ServerKey, "")
	require.NoError(t, err)
	cliTLS, err := ClientTLSConfig(p.CAFile, "", "", "")
	require.NoError(t, err)
	srv, cli = pair(t, "tls://127.0.0.1:0", Options{TLS: srvTLS}, Options{TLS: cliTLS})
	_, ok = cli.(TryWriter)
	assert.False(t, ok, "TLS records cannot be cut where the send buffer fills")
	_, ok = srv.(TryWriter)
	assert.False(t, ok)

	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	_, ok = NewStreamConn(a, "pipe", Options{}).(TryWriter)
	assert.False(t, ok, "a pipe has no socket")
}

// TryWrite writes what fits and returns at once when the send buffer is
// full; the rest follows with WriteMessages and arrives intact, in order.
func TestTryWriteNeverWaits(t *testing.T) {
	srv, cli := pair(t, "tcp://127.0.0.1:0", Options{}, Options{})
	require.NoError(t, streamOf(cli).c.(*net.TCPConn).SetWriteBuffer(4096))
	require.NoError(t, streamOf(srv).c.(*net.TCPConn).SetReadBuffer(4096))
	tw := cli.(TryWriter)

	// An expired deadline of an earlier WriteMessages does not matter.
	require.NoError(t, cli.WriteMessages(testMsg(24, 272, 0)))
	require.NoError(t, streamOf(cli).c.SetWriteDeadline(time.Now().Add(-time.Second)))

	var sent [][]byte
	var partial, full bool
	rest := make(chan error, 1)
	start := time.Now()
	for i := uint32(1); !full; i++ {
		require.Less(t, time.Since(start), 10*time.Second, "the send buffer never filled")
		m := testMsg(16000, 272, i)
		n, err := tw.TryWrite(m)
		require.NoError(t, err)
		sent = append(sent, m)
		if n < len(m) {
			partial = partial || n > 0
			full = true
			// What did not fit goes out with a blocking write, once the
			// far end reads.
			go func() { rest <- cli.WriteMessages(m[n:]) }()
		}
	}
	assert.Less(t, time.Since(start), time.Second, "TryWrite waited")
	t.Logf("%d messages, the last partly written: %v", len(sent), partial)

	got, err := srv.ReadMessage()
	require.NoError(t, err)
	require.Equal(t, testMsg(24, 272, 0), got)
	for i, want := range sent {
		got, err := srv.ReadMessage()
		require.NoError(t, err, "message %d", i)
		require.True(t, bytes.Equal(want, got), "message %d", i)
	}

	require.NoError(t, <-rest)

	// The buffer has room again: a whole message goes in one call.
	m := testMsg(100, 272, 99)
	n, err := tw.TryWrite(m)
	require.NoError(t, err)
	require.Equal(t, len(m), n)
	got, err = srv.ReadMessage()
	require.NoError(t, err)
	require.Equal(t, m, got)
}

func TestTryWriteAfterClose(t *testing.T) {
	_, cli := pair(t, "tcp://127.0.0.1:0", Options{}, Options{})
	require.NoError(t, cli.Close())
	n, err := cli.(TryWriter).TryWrite(testMsg(24, 272, 1))
	assert.Zero(t, n)
	assert.ErrorIs(t, err, net.ErrClosed)
}
