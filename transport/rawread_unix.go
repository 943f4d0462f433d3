//go:build unix

package transport

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/aaatp/aaatp/wire"
)

// readBufs holds the read buffers of the TCP connections that are waiting
// for data: an idle connection keeps none (see rawFrames).
var readBufs = sync.Pool{New: func() any { return new([readBufferSize]byte) }}

// rawFrames is the frame reader of a plain TCP connection. It reads the
// socket through its RawConn, so that it sees the read that would block:
// when that happens with nothing buffered, it gives its buffer back to
// readBufs before waiting, and takes one again once the socket is
// readable. An idle connection therefore waits for its next message
// holding no buffer, and a busy one still reads a burst of messages per
// system call.
type rawFrames struct {
	rc     syscall.RawConn
	laddr  net.Addr // for errors, as net.Conn.Read gives them
	raddr  net.Addr
	maxLen uint32

	buf  *[readBufferSize]byte // nil while none is held
	r, w int                   // buf[r:w] is read and not consumed
	held atomic.Bool           // buf != nil, for tests on other goroutines

	// A message whose body a read deadline cut short: part[:partN] is
	// read, and the next readMessage goes on with it.
	part  []byte
	partN int

	// The arguments and results of read, kept here so that a read does
	// not allocate a closure: direct is where to read (nil: into buf).
	direct []byte
	n      int
	errno  error
	readFn func(fd uintptr) bool
}

func newRawFrames(rc syscall.RawConn, tc *net.TCPConn, maxLen uint32) *rawFrames {
	f := &rawFrames{rc: rc, laddr: tc.LocalAddr(), raddr: tc.RemoteAddr(), maxLen: maxLen}
	f.readFn = f.read
	return f
}

// read is the callback of rc.Read: one read(2) on the non-blocking socket.
// It returns false (wait for the socket to be readable, then call again)
// when the read would block, after giving the buffer back if it holds
// nothing unread.
func (f *rawFrames) read(fd uintptr) bool {
	dst := f.direct
	if dst == nil {
		if f.buf == nil {
			f.buf = readBufs.Get().(*[readBufferSize]byte)
			f.held.Store(true)
		}
		dst = f.buf[f.w:]
	}
	for {
		n, err := syscall.Read(int(fd), dst)
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			if f.r == f.w && f.buf != nil {
				readBufs.Put(f.buf)
				f.buf, f.r, f.w = nil, 0, 0
				f.held.Store(false)
			}
			return false
		}
		f.n, f.errno = max(n, 0), err
		return true
	}
}

// sysRead reads once into dst, or into buf[w:] when dst is nil, waiting
// for data. It returns io.EOF when the peer has closed.
func (f *rawFrames) sysRead(dst []byte) (int, error) {
	f.direct, f.n, f.errno = dst, 0, nil
	err := f.rc.Read(f.readFn)
	n, errno := f.n, f.errno
	f.direct, f.errno = nil, nil
	switch {
	case err != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: f.laddr, Addr: f.raddr, Err: err}
	case errno != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: f.laddr, Addr: f.raddr, Err: os.NewSyscallError("read", errno)}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// fill reads more bytes into the buffer, after what it holds.
func (f *rawFrames) fill() error {
	if f.buf != nil && f.r > 0 {
		f.w = copy(f.buf[:], f.buf[f.r:f.w])
		f.r = 0
	}
	n, err := f.sysRead(nil)
	f.w += n
	return err
}

// readMessage is frameReader.readMessage for the socket: the same
// framing, validation and errors. A read deadline that passes loses
// nothing: a header is consumed only whole, and a body cut short is
// kept for the next call (see tcpConn.ReadResumes).
func (f *rawFrames) readMessage() ([]byte, error) {
	msg, n := f.part, f.partN
	f.part, f.partN = nil, 0
	if msg == nil {
		for f.w-f.r < wire.HeaderLen {
			if err := f.fill(); err != nil {
				if err == io.EOF && f.w > f.r {
					err = io.ErrUnexpectedEOF // part of a header
				}
				return nil, err
			}
		}
		h, _ := wire.ParseHeader(f.buf[f.r : f.r+wire.HeaderLen]) // cannot fail on 20 bytes
		// Validate before allocating: the length is 24 bits the peer chose.
		if err := wire.Validate(h, f.maxLen); err != nil {
			return nil, err
		}
		msg = make([]byte, h.Length)
		n = copy(msg, f.buf[f.r:f.w])
		f.r += n
	}
	for n < len(msg) {
		// The buffer is empty: a large rest goes straight into msg.
		var err error
		if len(msg)-n >= readBufferSize {
			var m int
			m, err = f.sysRead(msg[n:])
			n += m
		} else if err = f.fill(); err == nil {
			m := copy(msg[n:], f.buf[f.r:f.w])
			f.r += m
			n += m
		}
		if err != nil {
			switch {
			case err == io.EOF:
				err = io.ErrUnexpectedEOF // the header promised a body
			case errors.Is(err, os.ErrDeadlineExceeded):
				f.part, f.partN = msg, n
			}
			return nil, err
		}
	}
	return msg, nil
}
