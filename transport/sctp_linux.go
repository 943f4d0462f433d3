//go:build linux && !386

package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ishidawataru/sctp"

	"github.com/aaatp/aaatp/wire"
)

// diameterPPID is the SCTP Payload Protocol Identifier IANA assigned to
// Diameter (RFC 6733 section 2.1).
const diameterPPID = 46

// sctpSupported probes the kernel with the same socket() call the sctp
// package makes, so that only a failure of socket() itself is reported as
// ErrSCTPUnsupported (the package returns socket, bind and connect errors
// alike).
func sctpSupported() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, syscall.IPPROTO_SCTP)
	if err != nil {
		if errors.Is(err, syscall.EPROTONOSUPPORT) || errors.Is(err, syscall.ESOCKTNOSUPPORT) || errors.Is(err, syscall.EAFNOSUPPORT) {
			return fmt.Errorf("%w: socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP): %w", ErrSCTPUnsupported, err)
		}
		return fmt.Errorf("transport: sctp socket: %w", err)
	}
	return syscall.Close(fd)
}

func initMsg(opts Options) sctp.InitMsg {
	return sctp.InitMsg{
		NumOstreams:    opts.SCTPStreams,
		MaxInstreams:   opts.SCTPStreams,
		MaxAttempts:    opts.SCTPInitAttempts,
		MaxInitTimeout: uint16(opts.SCTPInitTimeout / time.Millisecond),
	}
}

func resolveSCTP(ep Endpoint) (*sctp.SCTPAddr, error) {
	a, err := sctp.ResolveSCTPAddr("sctp", ep.Address())
	if err != nil {
		return nil, fmt.Errorf("transport: resolve %s: %w", ep, err)
	}
	return a, nil
}

func dialSCTP(ctx context.Context, ep Endpoint, opts Options) (Conn, error) {
	if err := sctpSupported(); err != nil {
		return nil, err
	}
	raddr, err := resolveSCTP(ep)
	if err != nil {
		return nil, err
	}
	// The sctp package's connect blocks with no context; run it aside so
	// ctx is honoured. The INIT attempts/timeout bound how long it can
	// outlive us, and a connection that arrives too late is closed.
	type result struct {
		c   *sctp.SCTPConn
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := sctp.DialSCTPExt("sctp", nil, raddr, initMsg(opts))
		done <- result{c, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("transport: dial %s: %w", ep, r.err)
		}
		return newSCTPConn(r.c, opts)
	case <-ctx.Done():
		go func() {
			if r := <-done; r.err == nil {
				_ = r.c.Close()
			}
		}()
		return nil, fmt.Errorf("transport: dial %s: %w", ep, ctx.Err())
	}
}

func listenSCTP(ep Endpoint, opts Options) (Listener, error) {
	if err := sctpSupported(); err != nil {
		return nil, err
	}
	laddr, err := resolveSCTP(ep)
	if err != nil {
		return nil, err
	}
	ln, err := sctp.ListenSCTPExt("sctp", laddr, initMsg(opts))
	if err != nil {
		return nil, fmt.Errorf("transport: listen %s: %w", ep, err)
	}
	return &sctpListener{ln: ln, opts: opts}, nil
}

type sctpListener struct {
	ln     *sctp.SCTPListener
	opts   Options
	closed atomic.Bool
	once   sync.Once
	err    error
}

func (l *sctpListener) Accept() (Conn, error) {
	c, err := l.ln.AcceptSCTP()
	if err != nil {
		if l.closed.Load() {
			return nil, net.ErrClosed
		}
		return nil, fmt.Errorf("transport: sctp accept: %w", err)
	}
	return newSCTPConn(c, l.opts)
}

func (l *sctpListener) Close() error {
	l.once.Do(func() { l.closed.Store(true); l.err = l.ln.Close() })
	return l.err
}

func (l *sctpListener) Addr() net.Addr { return l.ln.Addr() }

// sctpConn carries one Diameter message per SCTP message on a one-to-one
// socket.
type sctpConn struct {
	c            *sctp.SCTPConn
	fr           frameReader
	writeTimeout time.Duration
	streams      uint16 // outbound streams actually negotiated
	next         uint16 // next application stream (writer goroutine only)
	closed       atomic.Bool
	once         sync.Once
	err          error
	// The addresses, read once when the connection is made: the sctp
	// package asks the socket each time, and gets nothing (a nil
	// net.Addr) once the association is aborted or the socket closed,
	// which is when a log line about the lost connection asks.
	laddr, raddr net.Addr
}

// sctpAddrs returns c's addresses, each a placeholder where the socket
// gives none, so that a connection's addresses are never nil.
func sctpAddrs(c interface {
	LocalAddr() net.Addr
	RemoteAddr() net.Addr
}) (local, remote net.Addr) {
	local, remote = c.LocalAddr(), c.RemoteAddr()
	if local == nil {
		local = unknownSCTPAddr{}
	}
	if remote == nil {
		remote = unknownSCTPAddr{}
	}
	return local, remote
}

// unknownSCTPAddr stands for an address the socket no longer reports.
type unknownSCTPAddr struct{}

func (unknownSCTPAddr) Network() string { return "sctp" }
func (unknownSCTPAddr) String() string  { return "sctp:unknown-address" }

func newSCTPConn(c *sctp.SCTPConn, opts Options) (Conn, error) {
	streams := opts.SCTPStreams
	// The peer may grant fewer inbound streams than we asked for;
	// sending on a stream beyond that fails with EINVAL.
	if st, err := c.GetStatus(); err == nil && st.Ostreams > 0 && st.Ostreams < streams {
		streams = st.Ostreams
	}
	// The sctp package has no deadlines (SetWriteDeadline returns
	// EOPNOTSUPP); SO_SNDTIMEO bounds each blocking sendmsg instead.
	// SCTP_NODELAY: Linux SCTP otherwise holds small messages back to
	// bundle them, as Nagle does on TCP, and RFC 3539 3.2 says Nagle is
	// not used with SCTP; a DWA or an answer must leave at once.
	if rc, err := c.SyscallConn(); err == nil {
		tv := syscall.NsecToTimeval(opts.WriteTimeout.Nanoseconds())
		var serr, nerr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptTimeval(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &tv)
			nerr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_SCTP, sctp.SCTP_NODELAY, 1)
		}); err != nil || serr != nil || nerr != nil {
			_ = c.Close()
			return nil, fmt.Errorf("transport: sctp SO_SNDTIMEO, SCTP_NODELAY: %w", errors.Join(err, serr, nerr))
		}
	}
	s := &sctpConn{c: c, writeTimeout: opts.WriteTimeout, streams: streams, next: 1}
	s.laddr, s.raddr = sctpAddrs(c)
	// With the kernel's default fragment interleave level (0), the
	// messages of all streams arrive whole and one after another, so the
	// socket reads as a byte stream of back-to-back messages and the
	// same validated framing applies.
	s.fr = frameReader{src: sctpReader{s}, maxLen: opts.MaxMessageLen}
	return s, nil
}

type sctpReader struct{ s *sctpConn }

func (r sctpReader) Read(b []byte) (int, error) {
	n, _, err := r.s.c.SCTPRead(b)
	if err != nil && r.s.closed.Load() {
		return n, net.ErrClosed
	}
	return n, err
}

func (s *sctpConn) ReadMessage() ([]byte, error) { return s.fr.readMessage() }

// streamFor picks the SCTP stream for msg: 0 for the base protocol's
// connection-management messages, so they are never stuck behind
// application traffic, and round-robin over the others for the rest.
func (s *sctpConn) streamFor(msg []byte) uint16 {
	if s.streams <= 1 || len(msg) < wire.HeaderLen {
		return 0
	}
	switch wire.CommandCode(msg) {
	case wire.CmdCapabilitiesExchange, wire.CmdDeviceWatchdog, wire.CmdDisconnectPeer:
		return 0
	}
	st := s.next
	s.next++
	if s.next >= s.streams {
		s.next = 1
	}
	return st
}

// WriteMessages sends each message as one SCTP message (one sendmsg each:
// SCTP preserves message boundaries, so there is no writev batching). The
// deadline is checked between messages, and each sendmsg is bounded by
// SO_SNDTIMEO = WriteTimeout, so a batch takes at most about twice
// WriteTimeout. A timeout matches os.ErrDeadlineExceeded.
func (s *sctpConn) WriteMessages(msgs ...[]byte) error {
	deadline := time.Now().Add(s.writeTimeout)
	for i, m := range msgs {
		if i > 0 && time.Now().After(deadline) {
			return fmt.Errorf("transport: sctp write: %w", os.ErrDeadlineExceeded)
		}
		info := &sctp.SndRcvInfo{Stream: s.streamFor(m), PPID: diameterPPID}
		if _, err := s.c.SCTPWrite(m, info); err != nil {
			if errors.Is(err, syscall.EAGAIN) {
				return fmt.Errorf("transport: sctp write: %w (%w)", os.ErrDeadlineExceeded, err)
			}
			if s.closed.Load() {
				return net.ErrClosed
			}
			return fmt.Errorf("transport: sctp write: %w", err)
		}
	}
	return nil
}

func (s *sctpConn) Close() error {
	s.once.Do(func() { s.closed.Store(true); s.err = s.c.Close() })
	return s.err
}

func (s *sctpConn) LocalAddr() net.Addr  { return s.laddr }
func (s *sctpConn) RemoteAddr() net.Addr { return s.raddr }
func (s *sctpConn) Network() string      { return SchemeSCTP }
