package radpeer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/transport"
	lradius "layeh.com/radius"
)

// Over TCP, a packet that is not a request (an Access-Accept sent to the
// server: a client and a server swapped) is dropped, counted and logged
// at the log's rate, as over UDP; the connection goes on.
func TestServerNonRequestLogged(t *testing.T) {
	var lines lineBuffer
	srv, c := startMATCP(t, ServerConfig{Logger: lines.logger()})
	logged := serve.Count(serve.KindBadRequest)
	req := signedRequest(t, 1, "alice")
	c.send(t, unsignedAnswer(req, lradius.CodeAccessAccept, nil))
	c.exchange(t, signedRequest(t, 2, "after"))
	if n := serve.Count(serve.KindBadRequest) - logged; n != 1 {
		t.Errorf("an Access-Accept sent to the server: %d bad_request log events, want 1 (log: %q)", n, lines.String())
	}
	if st := srv.Stats(); st.Dropped != 1 {
		t.Errorf("Dropped %d, want 1", st.Dropped)
	}
}

// RFC 3579 3.2: an Access-Request with EAP-Message and no
// Message-Authenticator is silently discarded, whatever the policy mode
// (auto from a client never seen signing, never), counted and logged;
// signed, it is answered.
func TestServerEAPWithoutMADiscarded(t *testing.T) {
	eap := &lradius.AVP{Type: attrEAPMessage, Attribute: []byte{2, 1, 0, 10, 1, 'a', 'l', 'i', 'c', 'e'}} // EAP-Response/Identity
	user := &lradius.AVP{Type: radius.AttrUserName, Attribute: []byte("alice")}
	for _, mode := range []MessageAuthenticatorMode{RequireMAAuto, RequireMANever} {
		t.Run("udp/"+mode.String(), func(t *testing.T) {
			logged := serve.Count(serve.KindBadRequest)
			srv := startMAUDP(t, ServerConfig{RequireMessageAuthenticator: mode, Logger: quietLogger})
			c := dialUDP(t, "127.0.0.1", srv)
			if ans := udpExchange(t, c, unsignedRequest(t, lradius.CodeAccessRequest, 1, user, eap), 300*time.Millisecond); ans != nil {
				t.Errorf("EAP-Message without Message-Authenticator answered with %s", radius.Code(ans))
			}
			if st := srv.MAPolicyStats(); st.EAPWithoutMA != 1 {
				t.Errorf("MAPolicyStats %+v, want EAPWithoutMA 1", st)
			}
			if serve.Count(serve.KindBadRequest) == logged {
				t.Error("not logged")
			}
			signed, _, _ := radius.EncodeRequest(&radius.Request{Code: lradius.CodeAccessRequest, Attributes: lradius.Attributes{user, eap}}, 2, testSecret)
			if ans := udpExchange(t, c, signed, 5*time.Second); ans == nil {
				t.Error("a signed EAP Access-Request was not answered")
			}
		})
		t.Run("tcp/"+mode.String(), func(t *testing.T) {
			srv, c := startMATCP(t, ServerConfig{RequireMessageAuthenticator: mode, Logger: quietLogger})
			c.dropped(t, unsignedRequest(t, lradius.CodeAccessRequest, 1, user, eap), 2)
			if st := srv.MAPolicyStats(); st.EAPWithoutMA != 1 {
				t.Errorf("MAPolicyStats %+v, want EAPWithoutMA 1", st)
			}
		})
	}
}

// Over radsec:// the BlastRADIUS rules do not apply (TLS protects the
// packet): a relayed Access-Request with Proxy-State and no
// Message-Authenticator is answered, and a RadSec proxy that relayed one
// signed request still has another NAS's unsigned ones answered. A
// Message-Authenticator that is present is still verified, and
// Status-Server and EAP-Message still need one.
func TestServerRadSecNoBlastRADIUSRules(t *testing.T) {
	ln := newPipeListener()
	srv, err := NewServer(ln, SchemeRadSec, ServerConfig{RequireMessageAuthenticator: RequireMAAuto, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	defer mustClose(t, srv)
	c := connect(t, ln)
	enc := func(b []byte) []byte { // re-sign what unsignedRequest made, for "radsec"
		p, _ := lradius.Parse(b, testSecret)
		p.Secret = RadSecSecret
		out, _ := p.Encode()
		return out
	}
	send := func(b []byte) bool {
		if err := c.tc.WriteMessages(b); err != nil {
			t.Fatal(err)
		}
		c.conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		_, err := c.tc.ReadMessage()
		c.conn.SetReadDeadline(time.Time{})
		return err == nil
	}
	ps := &lradius.AVP{Type: radius.AttrProxyState, Attribute: []byte("hop1")}
	if !send(enc(unsignedRequest(t, lradius.CodeAccessRequest, 1, ps))) {
		t.Errorf("relayed Access-Request with Proxy-State, no Message-Authenticator: dropped (policy %+v)", srv.MAPolicyStats())
	}
	signed, _, _ := radius.EncodeRequest(accessReq("nas1-user"), 2, RadSecSecret)
	if !send(signed) {
		t.Fatal("signed request not answered")
	}
	if !send(enc(unsignedRequest(t, lradius.CodeAccessRequest, 3, &lradius.AVP{Type: radius.AttrUserName, Attribute: []byte("nas2-user")}))) {
		t.Errorf("once the proxy relayed one signed request, another NAS's unsigned one is dropped (policy %+v)", srv.MAPolicyStats())
	}
	eap := &lradius.AVP{Type: attrEAPMessage, Attribute: []byte{2, 1, 0, 5, 1}}
	if send(enc(unsignedRequest(t, lradius.CodeAccessRequest, 4, eap))) {
		t.Error("EAP-Message without Message-Authenticator answered over radsec")
	}
	if st := srv.MAPolicyStats(); st.Refused != 0 || st.ProxyState != 0 || st.Clients != 0 {
		t.Errorf("policy %+v: want nothing refused for the BlastRADIUS rules, no client remembered", st)
	}
}

// A request answered before SetClients changed its source's secret is
// answered again from the duplicate cache when its byte-for-byte
// retransmission comes after the change (its answer was lost): signed
// with the secret it was verified with. A new request on the old secret
// still fails verification.
func TestUDPServerRetransmissionAfterSetClientsAnsweredFromCache(t *testing.T) {
	srv, c := startUDP(t, ServerConfig{Secret: []byte("old"), Logger: quietLogger})
	req, _, _ := radius.EncodeRequest(acctReq("s1"), 1, []byte("old"))
	c.Write(req)
	first, err := readAnswer(c, 5*time.Second) // the answer the NAS lost
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.SetClients([]byte("new"), nil); err != nil {
		t.Fatal(err)
	}
	c.Write(req) // the NAS's retransmission
	ans, err := readAnswer(c, 5*time.Second)
	if err != nil {
		t.Fatalf("the retransmission of a request answered before SetClients got no answer (%v); stats %+v", err, srv.Stats())
	}
	if !bytes.Equal(ans, first) {
		t.Errorf("the retransmission's answer differs from the first")
	}
	if st := srv.Stats(); st.Resent != 1 || st.BadAuth != 0 || st.Received != 1 {
		t.Errorf("stats %+v: want 1 received, 1 resent, no bad authenticator", st)
	}
	// Not byte-identical (another Acct-Session-Id, same Identifier and
	// authenticator bytes): verified, and fails on the new secret.
	other, _, _ := radius.EncodeRequest(acctReq("s2"), 1, []byte("old"))
	copy(other[4:20], req[4:20])
	c.Write(other)
	waitFor(t, "the altered copy failing verification", func() bool { return srv.Stats().BadAuth == 1 })
}

// A UDPServer on a wildcard address answers each request from the
// address it was sent to: a NAS that sent to 127.0.0.2 (a VIP, a
// secondary address) gets its answer from 127.0.0.2, not from the
// kernel's preferred 127.0.0.1, which a connected socket drops. On an
// IPv4 socket (0.0.0.0) and on a dual-stack one ([::], IPv4-mapped).
func TestUDPServerWildcardAnswersFromTheAddressSentTo(t *testing.T) {
	for _, ln := range []struct{ network, addr string }{{"udp4", "0.0.0.0:0"}, {"udp", ":0"}} {
		t.Run(ln.network+"/"+ln.addr, func(t *testing.T) {
			pc, err := net.ListenPacket(ln.network, ln.addr)
			if err != nil {
				t.Fatal(err)
			}
			srv, err := NewUDPServer(pc, ServerConfig{Secret: testSecret})
			if err != nil {
				t.Fatal(err)
			}
			go srv.Serve()
			defer mustClose(t, srv)
			port := pc.LocalAddr().(*net.UDPAddr).Port
			for i, to := range []netip.Addr{netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.3")} {
				// Unconnected, to see where the answer comes from.
				c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				req := signedRequest(t, byte(i+1), "alice")
				if _, err := c.WriteTo(req, &net.UDPAddr{IP: to.AsSlice(), Port: port}); err != nil {
					t.Skip(err)
				}
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				buf := make([]byte, radius.MaxLength)
				n, from, err := c.ReadFromUDPAddrPort(buf)
				if err != nil {
					t.Fatalf("request sent to %v: no answer (%v); stats %+v", to, err, srv.Stats())
				}
				if from.Addr().Unmap() != to || int(from.Port()) != port {
					t.Errorf("request sent to %v:%d answered from %v", to, port, from)
				}
				if err := radius.VerifyResponse(buf[:n], radius.Authenticator(req), testSecret, true); err != nil {
					t.Error(err)
				}
				// Its retransmission is answered from the cache, from the
				// same address.
				c.WriteTo(req, &net.UDPAddr{IP: to.AsSlice(), Port: port})
				if _, from, err = c.ReadFromUDPAddrPort(buf); err != nil || from.Addr().Unmap() != to {
					t.Errorf("retransmission to %v: answered from %v (%v)", to, from, err)
				}
			}
			// A connected socket, as a NAS or radclient uses, to 127.0.0.2.
			nas, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: port})
			if err != nil {
				t.Skip(err)
			}
			defer nas.Close()
			if ans := udpExchange(t, nas, signedRequest(t, 9, "bob"), 5*time.Second); ans == nil {
				t.Errorf("the NAS that sent to 127.0.0.2 got no answer; stats %+v", srv.Stats())
			}
		})
	}
}

// Shutdown closes a connection that owes nothing at once, and returns as
// soon as none is left: a NAS's persistent connection between requests
// does not hold it for its whole ctx. A connection with a request in its
// handler gets that answer, is not read further, and is closed once it
// is written.
func TestServerShutdownClosesConnectionsAsTheyIdle(t *testing.T) {
	hold := make(chan struct{})
	var held atomic.Int32
	h := func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
		if u, _ := radius.Attr(raw, radius.AttrUserName); string(u) == "carol" {
			held.Add(1)
			select {
			case <-hold:
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
	srv, err := NewServer(ln, SchemeTCP, ServerConfig{Secret: testSecret, Handler: h, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	defer mustClose(t, srv)
	addr := ln.Addr().String()
	idle := tcpFrom(t, netip.MustParseAddr("127.0.0.1"), addr)
	busy := tcpFrom(t, netip.MustParseAddr("127.0.0.1"), addr)
	for i, c := range []net.Conn{idle, busy} {
		c.Write(signedRequest(t, byte(i+1), "alice"))
		if _, err := readPacket(c, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	busy.Write(signedRequest(t, 3, "carol"))
	waitFor(t, "the busy connection's request in its handler", func() bool { return held.Load() == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(ctx) }()
	if _, err := readPacket(idle, 5*time.Second); err == nil {
		t.Error("the idle connection got a packet, want it closed")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Error("the idle connection was not closed by Shutdown")
	}
	waitFor(t, "both connections draining", func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		for c := range srv.conns {
			if _, idle := c.drainState(); idle == nil {
				return false
			}
		}
		return true
	})
	busy.Write(signedRequest(t, 4, "dave")) // read while draining: not handled
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with an answer owed", err)
	default:
	}
	close(hold)
	ans, err := readPacket(busy, 5*time.Second)
	if err != nil || radius.Identifier(ans) != 3 {
		t.Fatalf("the answer owed on the busy connection: %v (Identifier %d)", err, radius.Identifier(ans))
	}
	if _, err := readPacket(busy, 5*time.Second); err == nil {
		t.Error("a request read while draining was answered")
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown once both connections closed: %v", err)
	}
}

// SetClients revokes: a stream connection whose client was removed is
// closed at once; one whose client's secret changed keeps working on the
// old secret for SecretGrace (a NAS mid-rotation loses nothing), then is
// closed; one whose client is unchanged goes on.
func TestServerSetClientsRevokes(t *testing.T) {
	ln, err := Listen("radius+tcp://127.0.0.1:0", transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srcC := netip.MustParseAddr("127.0.0.5")
	clients := func(secretA string, withB bool) func(netip.Addr) (Client, bool) {
		return func(a netip.Addr) (Client, bool) {
			switch {
			case a == srcA:
				return Client{Name: "a", Secret: []byte(secretA)}, true
			case a == srcB && withB:
				return Client{Name: "b", Secret: []byte("secret-b")}, true
			case a == srcC:
				return Client{Name: "c", Secret: []byte("secret-c")}, true
			}
			return Client{}, false
		}
	}
	srv, err := NewServer(ln, SchemeTCP, ServerConfig{Clients: clients("secret-a", true), SecretGrace: 300 * time.Millisecond, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	defer mustClose(t, srv)
	addr := ln.Addr().String()
	ask := func(c net.Conn, id byte, secret string) error {
		t.Helper()
		req, _, _ := radius.EncodeRequest(accessReq("alice"), id, []byte(secret))
		c.Write(req)
		ans, err := readPacket(c, 5*time.Second)
		if err != nil {
			return err
		}
		return radius.VerifyResponse(ans, radius.Authenticator(req), []byte(secret), true)
	}
	closed := func(c net.Conn) bool { // closed by the server, not timed out
		_, err := readPacket(c, 5*time.Second)
		var ne net.Error
		return err != nil && !(errors.As(err, &ne) && ne.Timeout())
	}
	a, b, c := tcpFrom(t, srcA, addr), tcpFrom(t, srcB, addr), tcpFrom(t, srcC, addr)
	for i, x := range []struct {
		c      net.Conn
		secret string
	}{{a, "secret-a"}, {b, "secret-b"}, {c, "secret-c"}} {
		if err := ask(x.c, byte(i+1), x.secret); err != nil {
			t.Fatal(err)
		}
	}
	// b removed; a's secret rotated; c unchanged.
	if err := srv.SetClients(nil, clients("secret-a2", false)); err != nil {
		t.Fatal(err)
	}
	if !closed(b) {
		t.Error("the connection of a removed client is still open")
	}
	if err := ask(a, 10, "secret-a"); err != nil {
		t.Errorf("the connection whose secret changed, within its grace: %v", err)
	}
	if !closed(a) {
		t.Error("the connection whose secret changed is still open after its grace")
	}
	if err := ask(c, 11, "secret-c"); err != nil {
		t.Errorf("the unchanged client's connection: %v", err)
	}
	if err := ask(tcpFrom(t, srcA, addr), 12, "secret-a2"); err != nil {
		t.Errorf("a new connection on the new secret: %v", err)
	}
}

// Unsigned Access-Requests (no secret needed, over UDP from any address)
// from many sources take at most half of the queue: a NAS's signed
// request is queued, not refused.
func TestUDPServerUnsignedFloodDoesNotRefuseSigned(t *testing.T) {
	g := &gate{ch: make(chan struct{})}
	srv := startMAUDP(t, ServerConfig{Handler: g.handler, MaxInFlight: 1, MaxQueued: 4, Logger: quietLogger})
	for i := range 5 { // one runs; of the four from other sources, two wait
		c := dialUDP(t, fmt.Sprintf("127.0.0.%d", 3+i), srv)
		c.Write(unsignedRequest(t, lradius.CodeAccessRequest, byte(i+1), &lradius.AVP{Type: radius.AttrUserName, Attribute: []byte("mallory")}))
	}
	waitFor(t, "five unsigned requests read", func() bool { return srv.Stats().Received == 5 })
	nas := dialUDP(t, "127.0.0.1", srv)
	for id := range byte(3) { // two beside the unsigned, a third pushing one out
		nas.Write(signedRequest(t, id+1, "alice"))
	}
	waitFor(t, "the NAS's requests read", func() bool { return srv.Stats().Received == 8 })
	close(g.ch)
	for i := range 3 {
		if _, err := readAnswer(nas, 5*time.Second); err != nil {
			t.Fatalf("the NAS got %d answers to its 3 signed requests (%v); stats %+v", i, err, srv.Stats())
		}
	}
}

// A NAS's signed requests waiting in a full queue are not pushed out by
// unsigned requests from other (spoofable) sources: every one is
// answered.
func TestUDPServerUnsignedFloodDoesNotPushOutSigned(t *testing.T) {
	g := &gate{ch: make(chan struct{})}
	srv := startMAUDP(t, ServerConfig{Handler: g.handler, MaxInFlight: 1, MaxQueued: 4, Logger: quietLogger})
	nas := dialUDP(t, "127.0.0.1", srv)
	for id := range byte(5) { // one runs, four wait
		nas.Write(signedRequest(t, id+1, "alice"))
	}
	waitFor(t, "the NAS's five requests read", func() bool { return srv.Stats().Received == 5 })
	for i := range 4 {
		c := dialUDP(t, fmt.Sprintf("127.0.0.%d", 3+i), srv)
		c.Write(unsignedRequest(t, lradius.CodeAccessRequest, 1, &lradius.AVP{Type: radius.AttrUserName, Attribute: []byte("mallory")}))
	}
	waitFor(t, "nine requests read", func() bool { return srv.Stats().Received == 9 })
	close(g.ch)
	for i := range 5 {
		if _, err := readAnswer(nas, 5*time.Second); err != nil {
			t.Fatalf("the NAS got %d answers to its 5 signed requests (%v); stats %+v", i, err, srv.Stats())
		}
	}
}
