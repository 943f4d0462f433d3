package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/aaatp/aaatp/wire"
)

// readBufferSize is the size of each connection's read buffer: large enough
// that a burst of small messages costs one read syscall (about 80 ACRs of
// 200 bytes; 64 KiB and 16 KiB measured the same at 256 callers). A larger
// message is read past the buffer straight into its own slice. A plain TCP
// connection holds its buffer only while data is coming (see rawFrames);
// the other transports keep theirs from the first read on.
const readBufferSize = 16 << 10

// Conn is a connection carrying whole Diameter messages.
//
// ReadMessage must be called from one goroutine at a time and
// WriteMessages from one goroutine at a time (typically a dedicated reader
// and a dedicated writer); the two may run concurrently with each other.
// Close, LocalAddr, RemoteAddr and Network are safe to call from any
// goroutine, and Close unblocks pending reads and writes.
type Conn interface {
	// ReadMessage returns exactly one Diameter message in a newly
	// allocated slice the caller owns. It returns io.EOF when the peer
	// closed the connection between messages, io.ErrUnexpectedEOF when it
	// closed in the middle of one, and an error matching wire.ErrBadFrame
	// when the header fails wire.Validate (the connection must then be
	// closed: the stream cannot be resynchronized).
	ReadMessage() ([]byte, error)
	// WriteMessages writes msgs in order under one write deadline
	// (Options.WriteTimeout). Each msgs[i] must be one complete message;
	// the slices are not retained after return. On error the number of
	// messages delivered is unknown and the connection must be closed.
	WriteMessages(msgs ...[]byte) error
	// Close closes the connection; it is idempotent.
	Close() error
	// LocalAddr and RemoteAddr are never nil, before or after Close:
	// callers log them when a connection is lost.
	LocalAddr() net.Addr
	RemoteAddr() net.Addr
	// Network returns SchemeTCP, SchemeTLS or SchemeSCTP (or whatever
	// was given to NewStreamConn).
	Network() string
}

// Listener accepts Diameter connections. Its methods are safe for
// concurrent use; Close unblocks Accept, which then returns an error
// matching net.ErrClosed.
type Listener interface {
	Accept() (Conn, error)
	Close() error
	Addr() net.Addr
}

// frameReader reads one validated message at a time from a byte stream.
// Its buffer is allocated at the first read: a server closes connections
// over its limits as soon as they are accepted, and a flood of those must
// not cost a buffer (and the garbage collections it brings) each.
type frameReader struct {
	src    io.Reader
	r      *bufio.Reader // nil until the first read
	maxLen uint32
	hdr    [wire.HeaderLen]byte
	custom func(*bufio.Reader) ([]byte, error) // Options.ReadFrame
}

func (f *frameReader) messageBuffered() bool {
	if f.r == nil || f.custom != nil || f.r.Buffered() < 4 {
		return false
	}
	b, _ := f.r.Peek(f.r.Buffered()) // never reads: all of it is buffered
	return wholeMessage(b)
}

func (f *frameReader) readMessage() ([]byte, error) {
	if f.r == nil {
		f.r = bufio.NewReaderSize(f.src, readBufferSize)
	}
	if f.custom != nil {
		return f.custom(f.r)
	}
	if _, err := io.ReadFull(f.r, f.hdr[:]); err != nil {
		return nil, err // io.EOF if nothing was read, io.ErrUnexpectedEOF if part of a header
	}
	h, _ := wire.ParseHeader(f.hdr[:]) // cannot fail on 20 bytes
	// Validate before allocating: the length is 24 bits the peer chose.
	if err := wire.Validate(h, f.maxLen); err != nil {
		return nil, err
	}
	msg := make([]byte, h.Length)
	copy(msg, f.hdr[:])
	if _, err := io.ReadFull(f.r, msg[wire.HeaderLen:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // the header promised a body
		}
		return nil, err
	}
	return msg, nil
}

// streamConn frames Diameter over any reliable byte stream.
type streamConn struct {
	c            net.Conn
	network      string
	writeTimeout time.Duration
	fr           frameReader

	// Writer-goroutine state.
	bw      *bufio.Writer // lazily created for conns without writev
	scratch net.Buffers   // reused so a batch does not allocate
	vector  bool          // c supports writev through net.Buffers

	closeOnce sync.Once
	closeErr  error
}

// NewStreamConn wraps a stream connection (TCP, TLS, net.Pipe, ...) as a
// Conn. network is what Network reports. If c is a *net.TCPConn, or a
// *tls.Conn over one, Options.NoDelay is applied to its socket.
func NewStreamConn(c net.Conn, network string, opts Options) Conn {
	opts = opts.withDefaults()
	if tc := tcpOf(c); tc != nil {
		// Go's net package turns Nagle off on every TCP socket; RFC 3539
		// 3.2 wants it on unless the operator chose NoDelay. An error
		// here means the socket is already dead: the first I/O reports it.
		_ = tc.SetNoDelay(opts.NoDelay)
	}
	sc := &streamConn{
		c:            c,
		network:      network,
		writeTimeout: opts.WriteTimeout,
		fr:           frameReader{src: c, maxLen: opts.MaxMessageLen, custom: opts.ReadFrame},
	}
	if tc, ok := c.(*net.TCPConn); ok {
		sc.vector = true
		if t := newTCPConn(sc, tc); t != nil {
			return t
		}
	}
	return sc
}

func tcpOf(c net.Conn) *net.TCPConn {
	switch c := c.(type) {
	case *net.TCPConn:
		return c
	case *tls.Conn:
		tc, _ := c.NetConn().(*net.TCPConn)
		return tc
	}
	return nil
}

func (s *streamConn) ReadMessage() ([]byte, error) { return s.fr.readMessage() }

// MessageBuffered implements BufferedReader.
func (s *streamConn) MessageBuffered() bool { return s.fr.messageBuffered() }

// BufferedReader is implemented by the Conns that read through a buffer.
// MessageBuffered reports whether the next ReadMessage has its whole
// message received already, so that it returns without reading from the
// network: a reader answering the peer's messages may then leave its
// answers to be written together rather than one by one. Call it from
// the goroutine that calls ReadMessage.
type BufferedReader interface {
	MessageBuffered() bool
}

// wholeMessage reports whether b starts with a whole Diameter message
// (or a whole header too bad for one, which ReadMessage reports without
// reading further: with less than a header it reads the rest first,
// whatever the length field says).
func wholeMessage(b []byte) bool {
	if len(b) < wire.HeaderLen {
		return false
	}
	return len(b) >= int(b[1])<<16|int(b[2])<<8|int(b[3])
}

func (s *streamConn) WriteMessages(msgs ...[]byte) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := s.c.SetWriteDeadline(time.Now().Add(s.writeTimeout)); err != nil {
		return err
	}
	if len(msgs) == 1 {
		_, err := s.c.Write(msgs[0])
		return err
	}
	if s.vector {
		// net.Buffers.WriteTo consumes the slice it is called on (it
		// advances elements as they are written), so give it a copy
		// rather than the caller's msgs. On TCP it becomes writev: one
		// syscall per batch of up to 1024 messages.
		s.scratch = append(s.scratch[:0], msgs...)
		bufs := s.scratch
		_, err := bufs.WriteTo(s.c)
		clear(s.scratch) // do not keep the caller's messages alive
		return err
	}
	// No writev (TLS, pipes): coalesce through a buffer so a batch costs
	// a few large writes (TLS records) rather than one per message.
	if s.bw == nil {
		s.bw = bufio.NewWriterSize(s.c, readBufferSize)
	}
	for _, m := range msgs {
		if _, err := s.bw.Write(m); err != nil {
			s.bw.Reset(s.c)
			return err
		}
	}
	if err := s.bw.Flush(); err != nil {
		s.bw.Reset(s.c)
		return err
	}
	return nil
}

// TryWriter is implemented by the Conns that can write without ever
// waiting: plain TCP (not TLS, whose records cannot be cut where the
// socket's send buffer happens to fill, nor SCTP). A caller that has
// nothing else queued can then send a message from its own goroutine
// instead of waking a writer.
type TryWriter interface {
	// TryWrite writes what the socket's send buffer takes of msg right
	// now, in one write system call, and never waits. n < len(msg) with a
	// nil error means the buffer was full: msg[n:] must then be written
	// by WriteMessages (as if it were one message) before anything else.
	// An error means the connection failed and must be closed. TryWrite
	// counts as a write: it must not run concurrently with WriteMessages
	// or another TryWrite. It needs no write deadline, and ignores one
	// left by an earlier WriteMessages.
	TryWrite(msg []byte) (n int, err error)
}

// ReadDeadliner is implemented by the Conns over a net.Conn (TCP, TLS,
// pipes): a server sets a read deadline to close a connection that is
// idle, or that sends its messages too slowly, without a timer of its
// own. A ReadMessage that passes the deadline returns an error matching
// os.ErrDeadlineExceeded, and the connection must then be closed.
type ReadDeadliner interface {
	SetReadDeadline(t time.Time) error
}

// ReadInterrupter is implemented by the Conns whose ReadMessage a read
// deadline can interrupt without losing anything, when ReadResumes says
// so (plain TCP read by the package's own framing): a ReadMessage that
// returns an error matching os.ErrDeadlineExceeded has consumed no part
// of a message it did not return, and once the deadline is moved the
// next ReadMessage goes on where it stopped. The connection may then be
// kept. A deadline set from another goroutine thus wakes a reader
// without breaking the stream.
type ReadInterrupter interface {
	ReadDeadliner
	ReadResumes() bool
}

// SetReadDeadline implements ReadDeadliner.
func (s *streamConn) SetReadDeadline(t time.Time) error { return s.c.SetReadDeadline(t) }

// WriteCloser is implemented by the Conns that can shut their writing
// side alone, so that a server that is done answering lets the peer read
// everything to the end while it reads what the peer still sends: closed
// with data unread, a TCP socket is reset, and what it had not sent yet
// is lost.
//
// Over TCP, CloseWrite sends a FIN (shutdown(SHUT_WR)) and never waits.
// Over TLS (Go's tls.Conn.CloseWrite) it sends only a close_notify alert,
// which a peer's TLS stack reads as the end (io.EOF); the TCP connection
// stays open both ways, and the FIN comes with Close. That alert is a
// write: with the socket's send buffer full (a peer that does not read)
// it waits, up to 5 s (Go's own deadline for it); a Close meanwhile ends
// it within a fraction of a second. Do not call it under a lock.
type WriteCloser interface {
	CloseWrite() error
}

// CloseWrite implements WriteCloser when the connection beneath can;
// otherwise it reports errors.ErrUnsupported.
func (s *streamConn) CloseWrite() error {
	if c, ok := s.c.(interface{ CloseWrite() error }); ok {
		return c.CloseWrite()
	}
	return errors.ErrUnsupported
}

// Close closes the connection. Over TLS it sends a close_notify alert
// first, as tls.Conn.Close does, but waits at most tlsCloseWait for the
// socket to take it: a peer that does not read (its window closed, the
// send buffer full) would hold a Close, and whoever waits for it, for
// the 5 s Go allows that write. The socket is then closed under it.
func (s *streamConn) Close() error {
	s.closeOnce.Do(func() {
		if tc, ok := s.c.(*tls.Conn); ok {
			s.closeErr = closeTLS(tc, tlsCloseWait)
			return
		}
		s.closeErr = s.c.Close()
	})
	return s.closeErr
}

// tlsCloseWait bounds how long a TLS connection's Close waits for the
// socket to take its close_notify.
var tlsCloseWait = 200 * time.Millisecond

// closeTLS closes c, giving its close_notify at most wait to be written,
// then closing the socket beneath, which ends the write.
func closeTLS(c *tls.Conn, wait time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- c.Close() }()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		c.NetConn().Close()
		return <-done
	}
}

func (s *streamConn) LocalAddr() net.Addr  { return s.c.LocalAddr() }
func (s *streamConn) RemoteAddr() net.Addr { return s.c.RemoteAddr() }
func (s *streamConn) Network() string      { return s.network }

// Dial connects to rawURL. ctx bounds the whole dial, including the TLS
// handshake, together with Options.DialTimeout.
func Dial(ctx context.Context, rawURL string, opts Options) (Conn, error) {
	ep, err := ParseDialURL(rawURL)
	if err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, opts.DialTimeout)
	defer cancel()
	switch ep.Scheme {
	case SchemeSCTP:
		return dialSCTP(ctx, ep, opts)
	case SchemeTLS:
		cfg := opts.TLS
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName = ep.Host
		}
		d := tls.Dialer{Config: cfg}
		c, err := d.DialContext(ctx, "tcp", ep.Address())
		if err != nil {
			return nil, fmt.Errorf("transport: dial %s: %w", ep, err)
		}
		return NewStreamConn(c, SchemeTLS, opts), nil
	default:
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", ep.Address())
		if err != nil {
			return nil, fmt.Errorf("transport: dial %s: %w", ep, err)
		}
		return NewStreamConn(c, SchemeTCP, opts), nil
	}
}

// Listen listens on rawURL (host may be empty for all addresses, port 0 for
// an ephemeral port). tls:// requires Options.TLS.
func Listen(rawURL string, opts Options) (Listener, error) {
	ep, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	switch ep.Scheme {
	case SchemeSCTP:
		return listenSCTP(ep, opts)
	case SchemeTLS:
		if opts.TLS == nil || (len(opts.TLS.Certificates) == 0 && opts.TLS.GetCertificate == nil && opts.TLS.GetConfigForClient == nil) {
			return nil, fmt.Errorf("transport: listen %s: Options.TLS with a certificate is required", ep)
		}
	}
	ln, err := net.Listen("tcp", ep.Address())
	if err != nil {
		return nil, fmt.Errorf("transport: listen %s: %w", ep, err)
	}
	return &streamListener{ln: ln, scheme: ep.Scheme, opts: opts}, nil
}

type streamListener struct {
	ln     net.Listener
	scheme string
	opts   Options
}

// Accept returns the next connection. For TLS the handshake is started in
// the background, bounded by Options.DialTimeout, rather than run here:
// a slow or hostile client cannot stall the accept loop, and the client's
// Dial completes even before anyone calls ReadMessage on this side. The
// first ReadMessage or WriteMessages waits for the handshake and returns
// its error if it failed (a missing client certificate, a timeout, ...).
func (l *streamListener) Accept() (Conn, error) {
	c, err := l.ln.Accept()
	if err != nil {
		return nil, err
	}
	if l.scheme == SchemeTLS {
		tc := tls.Server(c, l.opts.TLS)
		timeout := l.opts.DialTimeout
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			// The error is kept by tls.Conn and returned by the next
			// Read or Write; on timeout the socket is closed.
			_ = tc.HandshakeContext(ctx)
		}()
		return NewStreamConn(tc, SchemeTLS, l.opts), nil
	}
	return NewStreamConn(c, SchemeTCP, l.opts), nil
}

func (l *streamListener) Close() error   { return l.ln.Close() }
func (l *streamListener) Addr() net.Addr { return l.ln.Addr() }

// ErrSCTPUnsupported is matched by the error Dial and Listen return for
// sctp:// when the kernel has no SCTP (socket() fails with
// EPROTONOSUPPORT, ESOCKTNOSUPPORT or EAFNOSUPPORT); the error also wraps
// the errno.
var ErrSCTPUnsupported = errors.New("transport: SCTP is not supported by this kernel")
