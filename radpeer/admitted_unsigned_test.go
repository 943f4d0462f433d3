package radpeer

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/transport"
	lradius "layeh.com/radius"
)

// Over radius+tcp:// an unsigned Access-Request on a connection that
// proved the secret before (admitted: here by a signed
// Accounting-Request) cannot come from anyone else, a TCP stream not
// being spoofed: it is not a weak request, and another NAS's signed
// requests do not push it out of the queue. A NAS that does not put
// Message-Authenticator in its Access-Requests keeps its logins.
func TestServerAdmittedConnectionsUnsignedRequestsAreNotWeak(t *testing.T) {
	open := make(chan struct{})
	h := func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
		if req.Code == lradius.CodeAccessRequest {
			select {
			case <-open:
			case <-ctx.Done():
				return 0, nil
			}
		}
		return AcceptAll(ctx, req, raw)
	}
	ln, err := Listen("radius+tcp://127.0.0.1:0", transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(ln, SchemeTCP, ServerConfig{Secret: testSecret, Handler: h, MaxInFlight: 1, MaxQueued: 4, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	defer mustClose(t, srv)
	addr := ln.Addr().String()
	nasA := tcpFrom(t, netip.MustParseAddr("127.0.0.2"), addr) // no Message-Authenticator in Access-Requests
	nasB := tcpFrom(t, netip.MustParseAddr("127.0.0.3"), addr) // signs them
	acct, _, _ := radius.EncodeRequest(acctReq("s1"), 1, testSecret)
	nasA.Write(acct)
	if _, err := readPacket(nasA, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "nasA admitted, nasB accepted", func() bool {
		st := srv.Stats()
		return st.Connections == 2 && st.Opening == 1 // nasB only
	})
	nasB.Write(signedRequest(t, 1, "b0")) // runs, held
	waitFor(t, "b0 read", func() bool { return srv.Stats().Received == 2 })
	user := &lradius.AVP{Type: radius.AttrUserName, Attribute: []byte("a")}
	nasA.Write(unsignedRequest(t, lradius.CodeAccessRequest, 2, user))
	nasA.Write(unsignedRequest(t, lradius.CodeAccessRequest, 3, user))
	waitFor(t, "a1, a2 read", func() bool { return srv.Stats().Received == 4 })
	for id := byte(2); id <= 5; id++ {
		nasB.Write(signedRequest(t, id, "b"))
		waitFor(t, "b read", func() bool { return srv.Stats().Received == uint64(3+id) })
	}
	close(open)
	got := 0
	for range 2 {
		if _, err := readPacket(nasA, time.Second); err == nil {
			got++
		}
	}
	if got < 2 {
		t.Errorf("the admitted NAS got %d of its 2 Access-Requests answered; stats %+v", got, srv.Stats())
	}
}
