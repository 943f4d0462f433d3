//go:build unix

package transport

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/wire"
)

// rawPair returns a Conn over the accepted end of a loopback TCP
// connection and the other end as a plain socket, to write arbitrary
// bytes in arbitrary pieces.
func rawPair(t testing.TB, ln net.Listener, opts Options) (Conn, *net.TCPConn) {
	t.Helper()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	w, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { w.Close() })
	s := <-accepted
	require.NotNil(t, s)
	w.(*net.TCPConn).SetNoDelay(true) // each piece its own segment
	c := NewStreamConn(s, SchemeTCP, opts)
	t.Cleanup(func() { c.Close() })
	return c, w.(*net.TCPConn)
}

func listenLoopback(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln
}

// The same bad frames and truncations as over a pipe give the same errors
// over a TCP socket, whose reader is its own.
func TestTCPReadMessageBadFrames(t *testing.T) {
	ln := listenLoopback(t)
	good, tests := badFrames()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, w := rawPair(t, ln, Options{MaxMessageLen: tt.maxLen})
			_, err := w.Write(tt.data)
			require.NoError(t, err)
			require.NoError(t, w.CloseWrite())
			msg, err := c.ReadMessage()
			assert.Nil(t, msg)
			require.ErrorIs(t, err, tt.wantErr)
			if tt.reason != "" {
				assert.Contains(t, err.Error(), tt.reason)
			}
		})
	}

	c, w := rawPair(t, ln, Options{})
	_, err := w.Write(append(bytes.Clone(good), badHeader(1, 12)...))
	require.NoError(t, err)
	msg, err := c.ReadMessage()
	require.NoError(t, err)
	assert.Equal(t, good, msg, "the good message before the garbage is delivered")
	_, err = c.ReadMessage()
	assert.ErrorIs(t, err, wire.ErrBadFrame)
}

// Messages of every size, small ones and ones larger than the read buffer,
// arrive whole and in order however the stream is cut into segments.
func TestTCPReadMessageAcrossSegments(t *testing.T) {
	c, w := rawPair(t, listenLoopback(t), Options{})
	rng := rand.New(rand.NewPCG(1, 2))
	var want [][]byte
	var stream []byte
	for i := range 300 {
		n := 20 + 4*rng.IntN(100)
		if i%25 == 0 {
			n = 20 + 4*rng.IntN(16000) // up to 64 KiB
		}
		m := testMsg(n, 280, uint32(i))
		want = append(want, m)
		stream = append(stream, m...)
	}
	errc := make(chan error, 1)
	go func() {
		for rest := stream; len(rest) > 0; {
			k := min(len(rest), 1+rng.IntN(3000))
			if _, err := w.Write(rest[:k]); err != nil {
				errc <- err
				return
			}
			rest = rest[k:]
			if rng.IntN(8) == 0 {
				time.Sleep(time.Millisecond) // let the reader drain and wait
			}
		}
		errc <- w.CloseWrite()
	}()
	for i, m := range want {
		got, err := c.ReadMessage()
		require.NoError(t, err, "message %d", i)
		require.Equal(t, m, got, "message %d", i)
	}
	_, err := c.ReadMessage()
	require.ErrorIs(t, err, io.EOF)
	require.NoError(t, <-errc)
}

// A connection waiting for its next message holds no read buffer; it
// takes one again when data comes.
func TestIdleTCPConnHoldsNoReadBuffer(t *testing.T) {
	c, w := rawPair(t, listenLoopback(t), Options{})
	rf := c.(*tcpConn).rf
	require.NotNil(t, rf)
	for i := range 3 {
		got := make(chan []byte, 1)
		go func() {
			m, err := c.ReadMessage()
			if err != nil {
				close(got)
				return
			}
			got <- m
		}()
		deadline := time.Now().Add(10 * time.Second)
		for rf.holding() {
			require.False(t, time.Now().After(deadline), "waiting reader %d still holds its buffer", i)
			time.Sleep(time.Millisecond)
		}
		m := testMsg(64, 280, uint32(i))
		_, err := w.Write(m)
		require.NoError(t, err)
		require.Equal(t, m, <-got)
	}
}

// Close unblocks a reader waiting without a buffer, with net.ErrClosed.
func TestTCPCloseUnblocksIdleReader(t *testing.T) {
	c, _ := rawPair(t, listenLoopback(t), Options{})
	errc := make(chan error, 1)
	go func() {
		_, err := c.ReadMessage()
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond) // most often the reader waits by now; either way Close must end it
	require.NoError(t, c.Close())
	select {
	case err := <-errc:
		require.True(t, errors.Is(err, net.ErrClosed), "got %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not unblock ReadMessage")
	}
}

// With Options.ReadFrame the TCP connection reads through the buffered
// reader the custom framing is given.
func TestTCPCustomReadFrameKeepsBufferedReader(t *testing.T) {
	c, _ := rawPair(t, listenLoopback(t), Options{ReadFrame: func(r *bufio.Reader) ([]byte, error) { return nil, io.EOF }})
	assert.Nil(t, c.(*tcpConn).rf)
}

func FuzzTCPReadMessage(f *testing.F) {
	for i, s := range readSeeds() {
		f.Add(s, []uint16{7, 1, 0, 3, 0, 0, 65535, 4095, 16383, 100, 20}[i%11])
		f.Add(s, uint16(999)) // in pieces: reads through the buffer as well as straight into the message
	}
	ln := listenLoopback(f)
	f.Fuzz(func(t *testing.T, data []byte, piece uint16) {
		c, w := rawPair(t, ln, Options{MaxMessageLen: fuzzMaxLen})
		go func() {
			k := int(piece) + 1
			for rest := data; len(rest) > 0; rest = rest[min(k, len(rest)):] {
				if _, err := w.Write(rest[:min(k, len(rest))]); err != nil {
					return
				}
			}
			w.CloseWrite()
		}()
		checkReadsInput(t, c, data)
	})
}

// A read deadline that passes in the middle of a message loses nothing
// on plain TCP (ReadInterrupter): once it is lifted, the next ReadMessage
// returns the message whole, wherever the deadline cut it (in the
// header, in a body read through the buffer, in a large body read
// straight into the message), and the one after it too.
func TestTCPReadDeadlineResumes(t *testing.T) {
	ln := listenLoopback(t)
	for _, tt := range []struct {
		name string
		size int
		cut  int
	}{
		{"in the header", 100, 7},
		{"in the body", 100, wire.HeaderLen + 30},
		{"in a large body", 3 * readBufferSize, wire.HeaderLen + readBufferSize + 100},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, w := rawPair(t, ln, Options{})
			ri, ok := c.(ReadInterrupter)
			require.True(t, ok)
			require.True(t, ri.ReadResumes())
			msg, next := testMsg(tt.size, 271, 1), testMsg(60, 271, 2)
			_, err := w.Write(msg[:tt.cut])
			require.NoError(t, err)
			require.NoError(t, ri.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
			_, err = c.ReadMessage()
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
			require.NoError(t, ri.SetReadDeadline(time.Time{}))
			_, err = w.Write(append(slices.Clone(msg[tt.cut:]), next...))
			require.NoError(t, err)
			got, err := c.ReadMessage()
			require.NoError(t, err)
			assert.Equal(t, msg, got)
			got, err = c.ReadMessage()
			require.NoError(t, err)
			assert.Equal(t, next, got)
		})
	}
	t.Run("a custom ReadFrame does not resume", func(t *testing.T) {
		c, _ := rawPair(t, ln, Options{ReadFrame: func(r *bufio.Reader) ([]byte, error) { return nil, io.EOF }})
		ri, ok := c.(ReadInterrupter)
		require.True(t, ok)
		assert.False(t, ri.ReadResumes())
	})
}

// holding reports whether f holds a read buffer. Safe on any goroutine.
func (f *rawFrames) holding() bool { return f.held.Load() }
