package radpeer

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/transport"
	lradius "layeh.com/radius"
)

// Shutdown ends a draining connection in order once its last answer is
// written: the client's requests that came after the drain began are
// read and dropped, and the writing side is shut, so that the client
// reads the whole answer owed, then the end, not a reset that would
// throw away what its window had not taken yet.
func TestServerShutdownDeliversTheOwedAnswer(t *testing.T) {
	for _, small := range []bool{false, true} {
		name := "default-rcvbuf"
		if small {
			name = "small-rcvbuf"
		}
		t.Run(name, func(t *testing.T) {
			hold := make(chan struct{})
			var held atomic.Int32
			h := func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
				if u, _ := radius.Attr(raw, radius.AttrUserName); string(u) == "carol" {
					held.Add(1)
					<-hold
					var attrs lradius.Attributes
					for range 16 { // about 4000 bytes of Reply-Message
						attrs.Add(18, make([]byte, 240))
					}
					return lradius.CodeAccessAccept, attrs
				}
				return AcceptAll(ctx, req, raw)
			}
			ln, err := Listen("radius+tcp://127.0.0.1:0", transport.Options{})
			if err != nil {
				t.Fatal(err)
			}
			srv, err := NewServer(ln, SchemeTCP, ServerConfig{Secret: testSecret, Handler: h, Logger: quietLogger})
			if err != nil {
				t.Fatal(err)
			}
			go srv.Serve()
			defer mustClose(t, srv)
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}
			if small {
				d.Control = func(_, _ string, rc syscall.RawConn) error {
					return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1024) })
				}
			}
			c, err := d.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write(signedRequest(t, 1, "alice"))
			if _, err := readPacket(c, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			c.Write(signedRequest(t, 2, "carol"))
			waitFor(t, "carol in her handler", func() bool { return held.Load() == 1 })
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- srv.Shutdown(ctx) }()
			waitFor(t, "the connection draining", func() bool {
				srv.mu.Lock()
				defer srv.mu.Unlock()
				for sc := range srv.conns {
					if _, idle := sc.drainState(); idle == nil {
						return false
					}
				}
				return true
			})
			// The NAS does not know: it sends two more requests.
			c.Write(signedRequest(t, 3, "dave"))
			time.Sleep(100 * time.Millisecond)   // read by the reader, which then waits
			c.Write(signedRequest(t, 4, "erin")) // left in the receive queue
			time.Sleep(100 * time.Millisecond)
			close(hold)
			<-done
			time.Sleep(100 * time.Millisecond)
			ans, err := readPacket(c, 2*time.Second)
			if err != nil || radius.Identifier(ans) != 2 {
				t.Errorf("the answer owed when Shutdown began was lost: %v (got %d bytes)", err, len(ans))
			}
			_, err = readPacket(c, time.Second)
			t.Logf("then: %v", err)
			_ = netip.Addr{}
		})
	}
}
