package peer

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/wire"
)

// batonPipe is the client's end of a net.Pipe that callers may read (the
// reading baton), as a TCP socket's: it writes without waiting
// (TryWrite gives the far end's reader a nanosecond, which inside a
// synctest bubble passes only once every goroutine waits), and its reads
// a read deadline interrupts without losing a byte.
type batonPipe struct {
	transport.Conn // writes, addresses, Close
	raw            net.Conn
	buf            []byte
}

func (b *batonPipe) TryWrite(msg []byte) (int, error) {
	b.raw.SetWriteDeadline(time.Now().Add(time.Nanosecond))
	n, err := b.raw.Write(msg)
	b.raw.SetWriteDeadline(time.Time{})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = nil
	}
	return n, err
}

func (b *batonPipe) ReadMessage() ([]byte, error) {
	for {
		if n, ok := b.whole(); ok {
			msg := slices.Clone(b.buf[:n])
			b.buf = b.buf[n:]
			return msg, nil
		} else if n < 0 {
			return nil, wire.ErrBadFrame
		}
		var p [4096]byte
		k, err := b.raw.Read(p[:])
		b.buf = append(b.buf, p[:k]...)
		if err != nil {
			return nil, err
		}
	}
}

func (b *batonPipe) whole() (int, bool) {
	if len(b.buf) < 4 {
		return 0, false
	}
	n := int(b.buf[1])<<16 | int(b.buf[2])<<8 | int(b.buf[3])
	if n < wire.HeaderLen {
		return -1, false
	}
	return n, len(b.buf) >= n
}

func (b *batonPipe) MessageBuffered() bool             { _, ok := b.whole(); return ok }
func (b *batonPipe) SetReadDeadline(t time.Time) error { return b.raw.SetReadDeadline(t) }
func (b *batonPipe) ReadResumes() bool                 { return true }

// A request written inline, alone, while the reader has just finished the
// previous inline caller's call and is on its way to park: its caller
// finds the baton the reader's (the reader reads, it is told), and the
// reader, once parked, must not leave its answer lying until its look
// (batonIdle later): it sees the request pending as it leaves the baton
// free, and reads on.
func TestRequestSentAsTheReaderParksIsRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, far := dialPipeOver(t, clientConfig("client.example.net"), "server.example.net", func(a net.Conn) transport.Conn {
			return &batonPipe{Conn: transport.NewStreamConn(a, "pipe", transport.Options{}), raw: a}
		})
		defer p.Close(context.Background())
		c := p.cur.Load()
		require.NotNil(t, c.bt.rd, "the pipe has a baton")

		// The reader is held between its look (mayPark: nothing
		// pending) and leaving the baton free.
		atPark, goOn := make(chan struct{}), make(chan struct{})
		var once sync.Once
		parkHook = func(*conn) {
			once.Do(func() {
				close(atPark)
				<-goOn
			})
		}
		t.Cleanup(func() { parkHook = nil }) // after Close, which waits for the reader

		// A: the reader holds the baton; it reads A's answer and goes
		// to park.
		a := requestAsync(p, context.Background())
		reqA := readRequest(t, far)
		go far.WriteMessages(successAnswer(reqA))
		<-atPark
		require.NoError(t, (<-a).err)

		// B goes out inline, alone, its caller waits: the baton is the
		// reader's still.
		b := requestAsync(p, context.Background())
		reqB := readRequest(t, far)
		synctest.Wait()
		require.Equal(t, batonReader, c.bt.state.Load())

		// The reader parks; the server answers B at once.
		start := time.Now()
		close(goOn)
		go far.WriteMessages(successAnswer(reqB))
		require.NoError(t, (<-b).err)
		assert.Zero(t, time.Since(start), "B's answer lay unread until the parked reader's look")
	})
}
