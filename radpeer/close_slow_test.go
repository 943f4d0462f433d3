package radpeer

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/aaatp/aaatp/transport"
)

// slowCloseListener hands the server connections whose Close takes
// closeTakes: a radsec connection's close_notify to a client that reads
// nothing waits so (transport bounds it).
type slowCloseListener struct {
	transport.Listener
	closeTakes time.Duration
}

func (l *slowCloseListener) Accept() (transport.Conn, error) {
	tc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &slowCloseConn{Conn: tc, takes: l.closeTakes}, nil
}

type slowCloseConn struct {
	transport.Conn
	takes time.Duration
}

func (c *slowCloseConn) SetReadDeadline(t time.Time) error {
	return c.Conn.(transport.ReadDeadliner).SetReadDeadline(t)
}

func (c *slowCloseConn) Close() error {
	time.Sleep(c.takes)
	return c.Conn.Close()
}

// Close closes the connections all at once, after the server's lock:
// four connections whose Close takes 300 ms each took 1.2 s, one after
// another, with the lock held, so that Stats waited as long. Eight
// connections of 400 ms here: 3.2 s one after another, 0.4 s at once;
// the bound, half-way, leaves a loaded machine over a second of slack.
func TestServerCloseClosesConnectionsAtOnce(t *testing.T) {
	inner, err := Listen("radius+tcp://127.0.0.1:0", transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const takes, conns = 400 * time.Millisecond, 8
	srv, err := NewServer(&slowCloseListener{Listener: inner, closeTakes: takes}, SchemeTCP, ServerConfig{Secret: testSecret, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	for i := range conns {
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
	}
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- srv.Close(ctx)
	}()
	time.Sleep(takes / 3) // Close is closing the connections
	statsStart := time.Now()
	srv.Stats()
	if d := time.Since(statsStart); d > takes/2 {
		t.Errorf("Stats waited %v while Close closed the connections: the lock was held", d)
	}
	if err := <-done; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if d := time.Since(start); d > conns*takes/2 {
		t.Errorf("Close took %v for %d connections whose Close takes %v: one after another", d, conns, takes)
	}
}
