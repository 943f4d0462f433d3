package transport

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/aaatp/aaatp/wire"
)

// readerConn is a net.Conn reading from a fixed byte slice, so the fuzzer
// runs without goroutines or sockets.
type readerConn struct{ r *bytes.Reader }

func (c readerConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c readerConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c readerConn) Close() error                     { return nil }
func (c readerConn) LocalAddr() net.Addr              { return nil }
func (c readerConn) RemoteAddr() net.Addr             { return nil }
func (c readerConn) SetDeadline(time.Time) error      { return nil }
func (c readerConn) SetReadDeadline(time.Time) error  { return nil }
func (c readerConn) SetWriteDeadline(time.Time) error { return nil }

// fuzzMaxLen is the MaxMessageLen the read fuzzers use: the default, above
// readBufferSize, so that messages larger than the read buffer (read
// straight into the message on plain TCP, through bufio's large-read path
// otherwise) are fuzzed too.
const fuzzMaxLen = wire.DefaultMaxMessageLen

// readSeeds are the read fuzzers' inputs: small and large messages, one
// after another, cut short, and headers claiming too little or too much.
func readSeeds() [][]byte {
	good := testMsg(64, 280, 1)
	large := testMsg(3*readBufferSize+8, 271, 3) // over the read buffer
	short := testMsg(20, 280, 1)
	short[3] = 12
	huge := testMsg(20, 280, 1)
	huge[1], huge[2], huge[3] = 0xff, 0xff, 0xfc
	tooLarge := testMsg(readBufferSize+24, 280, 4)
	over := fuzzMaxLen + 4
	tooLarge[1], tooLarge[2], tooLarge[3] = byte(over>>16), byte(over>>8), byte(over)
	return [][]byte{
		good,
		append(bytes.Clone(good), testMsg(20, 257, 2)...),
		good[:30],
		short,
		huge,
		{},
		large,
		append(append(bytes.Clone(good), large...), good...),
		large[:2*readBufferSize+100],
		append(bytes.Clone(large), testMsg(fuzzMaxLen, 271, 5)...),
		tooLarge,
	}
}

func FuzzReadMessage(f *testing.F) {
	for _, s := range readSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c := NewStreamConn(readerConn{bytes.NewReader(data)}, "fuzz", Options{MaxMessageLen: fuzzMaxLen})
		checkReadsInput(t, c, data)
	})
}

// checkReadsInput reads c, whose peer sent data, to its end: every message
// returned is valid and is the next piece of data, the only errors are a
// bad frame or the end of the input, and a clean end comes only after all
// of data.
func checkReadsInput(t *testing.T, c Conn, data []byte) {
	t.Helper()
	total := 0
	for {
		msg, err := c.ReadMessage()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, wire.ErrBadFrame) {
				t.Fatalf("unexpected error %v", err)
			}
			if errors.Is(err, io.EOF) && total != len(data) {
				t.Fatalf("clean EOF after %d of %d bytes", total, len(data))
			}
			return
		}
		h, perr := wire.ParseHeader(msg)
		if perr != nil || wire.Validate(h, fuzzMaxLen) != nil || int(h.Length) != len(msg) {
			t.Fatalf("returned an invalid message %x", msg)
		}
		if !bytes.Equal(msg, data[total:total+len(msg)]) {
			t.Fatal("message bytes differ from the input")
		}
		total += len(msg)
	}
}
