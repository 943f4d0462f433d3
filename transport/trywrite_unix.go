//go:build unix

package transport

import (
	"errors"
	"net"
	"os"
	"syscall"
	"time"
)

// tcpConn is a streamConn over a plain TCP socket, with TryWrite.
type tcpConn struct {
	*streamConn
	rc syscall.RawConn
	rf *rawFrames // nil with Options.ReadFrame: the streamConn's reader then

	// TryWrite's arguments and results for write, which is kept as a
	// method value so that a TryWrite does not allocate a closure.
	buf     []byte
	n       int
	errno   error
	writeFn func(fd uintptr) bool
}

func (t *tcpConn) TryWrite(msg []byte) (int, error) {
	n, err := t.tryWrite(msg)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// The deadline of an earlier WriteMessages has passed; a write
		// that never waits needs none.
		if err := t.c.SetWriteDeadline(time.Time{}); err != nil {
			return 0, err
		}
		n, err = t.tryWrite(msg)
	}
	return n, err
}

func (t *tcpConn) tryWrite(msg []byte) (int, error) {
	t.buf, t.n, t.errno = msg, 0, nil
	err := t.rc.Write(t.writeFn)
	n, errno := t.n, t.errno
	t.buf, t.errno = nil, nil
	switch {
	case err != nil:
		return 0, err // closed, or the deadline has passed
	case errno == syscall.EAGAIN:
		return 0, nil // the send buffer is full
	case errno != nil:
		return 0, os.NewSyscallError("write", errno)
	}
	return n, nil
}

// write is the callback of rc.Write: one write(2) on the non-blocking
// socket, and true whatever happened, so that rc.Write never waits for
// the socket to become writable.
func (t *tcpConn) write(fd uintptr) bool {
	for {
		n, err := syscall.Write(int(fd), t.buf)
		if err == syscall.EINTR {
			continue
		}
		if n > 0 {
			t.n = n
		}
		t.errno = err
		return true
	}
}

func newTCPConn(sc *streamConn, tc *net.TCPConn) *tcpConn {
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	t := &tcpConn{streamConn: sc, rc: rc}
	t.writeFn = t.write
	if sc.fr.custom == nil {
		t.rf = newRawFrames(rc, tc, sc.fr.maxLen)
	}
	return t
}

func (t *tcpConn) ReadMessage() ([]byte, error) {
	if t.rf != nil {
		return t.rf.readMessage()
	}
	return t.streamConn.ReadMessage()
}

// MessageBuffered implements BufferedReader.
func (t *tcpConn) MessageBuffered() bool {
	if t.rf != nil {
		return t.rf.buf != nil && wholeMessage(t.rf.buf[t.rf.r:t.rf.w])
	}
	return t.streamConn.MessageBuffered()
}

// ReadResumes implements ReadInterrupter: true unless Options.ReadFrame
// reads the socket.
func (t *tcpConn) ReadResumes() bool { return t.rf != nil }
