package radpeer

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/transport"
)

// A connection from a source that is no configured client is closed
// before the opening limits count it: over MaxOpening it never pushes
// out a known client's connection not admitted yet.
func TestServerUnknownClientEvictsNoClient(t *testing.T) {
	ln, err := Listen("radius+tcp://127.0.0.1:0", transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(ln, SchemeTCP, ServerConfig{Clients: testClients, MaxOpening: 2, MaxOpeningPerAddr: 2, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	defer mustClose(t, srv)
	addr := ln.Addr().String()
	// Two NASes have connected and not sent their first request yet
	// (a watchdog's first Status-Server comes after 30 s).
	a, b := tcpFrom(t, srcA, addr), tcpFrom(t, srcB, addr)
	waitFor(t, "two opening connections", func() bool { return srv.Stats().Opening == 2 })
	// A stranger, no configured client, connects once.
	tcpFrom(t, srcUnknown, addr)
	waitFor(t, "the stranger refused", func() bool { st := srv.Stats(); return st.UnknownClient+st.Refused == 1 })
	for i, x := range []struct {
		c      net.Conn
		secret string
	}{{a, "secret-a"}, {b, "secret-b"}} {
		req, _, _ := radius.EncodeRequest(accessReq("alice"), byte(i+1), []byte(x.secret))
		x.c.Write(req)
		if _, err := readPacket(x.c, 2*time.Second); err != nil {
			t.Errorf("NAS %d's connection closed by a stranger's connection (%v); stats %+v", i, err, srv.Stats())
		}
	}
}

var _ = netip.Addr{}
