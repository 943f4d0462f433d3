package radpeer

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/aaatp/aaatp/transport"
)

// stuckListener hands the server connections of which the first one's
// CloseWrite blocks until release: the close_notify alert of a radsec
// connection whose client reads nothing, its socket's send buffer full,
// waits so (Go bounds that write at 5 s).
type stuckListener struct {
	transport.Listener
	mu       sync.Mutex
	accepted int
	entered  chan struct{} // closed when the stuck CloseWrite begins
	release  chan struct{}
}

func (l *stuckListener) Accept() (transport.Conn, error) {
	tc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.accepted++
	return &stuckConn{Conn: tc, stuck: l.accepted == 1, l: l}, nil
}

// stuckConn keeps the read deadline and half-close of the connection it
// wraps; the stuck one's CloseWrite waits for release first.
type stuckConn struct {
	transport.Conn
	stuck bool
	l     *stuckListener
}

func (c *stuckConn) SetReadDeadline(t time.Time) error {
	return c.Conn.(transport.ReadDeadliner).SetReadDeadline(t)
}

func (c *stuckConn) CloseWrite() error {
	if c.stuck {
		close(c.l.entered)
		<-c.l.release
	}
	return c.Conn.(transport.WriteCloser).CloseWrite()
}

// A drained connection whose half-close blocks (a radsec client that
// reads nothing, its socket's send buffer full) holds up neither
// Shutdown, which returns when its ctx ends, nor the drain of the other
// connections, which get their end at once: the half-close is written
// after the connection's lock is let go, not under it.
func TestServerShutdownNotHeldByABlockedHalfClose(t *testing.T) {
	inner, err := Listen("radius+tcp://127.0.0.1:0", transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ln := &stuckListener{Listener: inner, entered: make(chan struct{}), release: make(chan struct{})}
	srv, err := NewServer(ln, SchemeTCP, ServerConfig{Secret: testSecret, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	// Go's own bound on the close_notify write, shortened, and still
	// well after every check below: a Shutdown held by the stuck
	// half-close then returns, late, rather than hang the test.
	bound := time.AfterFunc(3*time.Second, func() { close(ln.release) })
	defer func() {
		if bound.Stop() {
			close(ln.release)
		}
		mustClose(t, srv)
	}()

	// The stuck connection first, then three others; each has had a
	// request answered, and owes nothing.
	var conns []net.Conn
	for i := range 4 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(signedRequest(t, byte(i+1), "alice")); err != nil {
			t.Fatal(err)
		}
		if _, err := readPacket(c, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	if open := srv.Stats().Open; open != 4 {
		t.Fatalf("%d connections open, want 4", open)
	}

	const timeout = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(ctx) }()
	select {
	case <-ln.entered:
	case <-time.After(2 * time.Second):
		t.Fatal("the stuck connection was not shut")
	}

	// The others end at once, whether drained before the stuck one or
	// after.
	for i, c := range conns[1:] {
		c.SetReadDeadline(start.Add(timeout / 2))
		var b [1]byte
		if n, err := c.Read(b[:]); err != io.EOF {
			t.Errorf("connection %d: %d bytes, %v within %v of Shutdown; want io.EOF: its drain waited for the stuck half-close", i+1, n, err, timeout/2)
		}
		c.Close()
	}

	select {
	case err := <-done:
		if took := time.Since(start); took > timeout+500*time.Millisecond {
			t.Errorf("Shutdown returned %v after it began, its ctx ending after %v", took, timeout)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Shutdown: %v; want its ctx's error (a connection was left to close)", err)
		}
	case <-time.After(timeout + 500*time.Millisecond):
		t.Errorf("Shutdown still running %v after its ctx ended: held by the stuck half-close", 500*time.Millisecond)
		<-done
	}
	// The stuck connection is closed all the same: its reader is gone.
	waitFor(t, "the stuck connection closed", func() bool { return srv.Stats().Open == 0 })
}
