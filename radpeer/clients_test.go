package radpeer

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/transport"
)

// Loopback sources of the clients tests: Linux answers every 127/8
// address on lo.
var (
	srcA       = netip.MustParseAddr("127.0.0.2") // client "a", secret "secret-a"
	srcB       = netip.MustParseAddr("127.0.0.3") // client "b", secret "secret-b"
	srcUnknown = netip.MustParseAddr("127.0.0.4")
)

func testClients(a netip.Addr) (Client, bool) {
	switch a {
	case srcA:
		return Client{Name: "a", Secret: []byte("secret-a")}, true
	case srcB:
		return Client{Name: "b", Secret: []byte("secret-b")}, true
	}
	return Client{}, false
}

// udpFrom dials the server's socket from src.
func udpFrom(t *testing.T, src netip.Addr, to net.Addr) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.UDPAddr{IP: src.AsSlice()}}
	c, err := d.Dial("udp", to.String())
	if err != nil {
		t.Skipf("cannot send from %s: %v", src, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// With Clients, a UDP request is verified and answered with its source's
// secret; a client using another's secret fails verification; a source
// Clients does not know is dropped before verification, counted and
// logged. The NAS counters carry the clients' names.
func TestUDPServerClients(t *testing.T) {
	var lines lineBuffer
	srv, _ := startUDP(t, ServerConfig{Secret: []byte("unused"), Clients: testClients, Logger: lines.logger()})
	logged := serve.Count(serve.KindUnknownClient)
	a, b, u := udpFrom(t, srcA, srv.Addr()), udpFrom(t, srcB, srv.Addr()), udpFrom(t, srcUnknown, srv.Addr())

	req, _, _ := radius.EncodeRequest(accessReq("alice"), 1, []byte("secret-a"))
	a.Write(req)
	ans, err := readAnswer(a, 5*time.Second)
	if err != nil {
		t.Fatalf("client a, its own secret: no answer: %v (stats %+v)", err, srv.Stats())
	}
	if err := radius.VerifyResponse(ans, radius.Authenticator(req), []byte("secret-a"), true); err != nil {
		t.Fatalf("client a's answer is not signed with its secret: %v", err)
	}

	reqB, _, _ := radius.EncodeRequest(accessReq("bob"), 2, []byte("secret-a")) // a's secret from b
	b.Write(reqB)
	waitFor(t, "b's request failing verification", func() bool { return srv.Stats().BadAuth == 1 })

	reqU, _, _ := radius.EncodeRequest(accessReq("eve"), 3, []byte("secret-a"))
	u.Write(reqU)
	waitFor(t, "the unknown source counted", func() bool { return srv.Stats().UnknownClient == 1 })
	if _, err := readAnswer(u, 50*time.Millisecond); err == nil {
		t.Fatal("a source of no client was answered")
	}
	if _, err := readAnswer(b, 10*time.Millisecond); err == nil {
		t.Fatal("client b was answered with client a's secret")
	}
	u.Write([]byte{1, 2, 3}) // not even a packet: refused for its source first
	waitFor(t, "the unknown source's junk counted", func() bool { return srv.Stats().UnknownClient == 2 })
	st := srv.Stats()
	if st.Received != 1 || st.BadAuth != 1 || st.UnknownClient != 2 || st.BadFrames != 0 {
		t.Fatalf("stats %+v: want 1 received, 1 bad auth, 2 unknown client, no bad frame", st)
	}
	names := map[string]string{}
	for _, n := range st.NAS {
		names[n.Addr] = n.Name
	}
	if names[srcA.String()] != "a" || names[srcB.String()] != "b" || len(names) != 2 {
		t.Errorf("NAS %+v: want a and b named, the unknown source not counted there", st.NAS)
	}
	// The datagram is counted in Stats before its log event is: wait for
	// the second.
	waitFor(t, "the unknown source's two log events", func() bool { return serve.Count(serve.KindUnknownClient)-logged >= 2 })
	if serve.Count(serve.KindUnknownClient)-logged != 2 {
		t.Errorf("log events unknown_client +%d, want +2", serve.Count(serve.KindUnknownClient)-logged)
	}
	if out := lines.String(); !strings.Contains(out, "no configured client") || !strings.Contains(out, "source="+srcUnknown.String()) {
		t.Errorf("log does not name the unknown source:\n%s", out)
	}
}

// tcpFrom connects to addr from src.
func tcpFrom(t *testing.T, src netip.Addr, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("cannot connect from %s: %v", src, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readPacket reads one RADIUS packet from a stream within d.
func readPacket(c net.Conn, d time.Duration) ([]byte, error) {
	c.SetReadDeadline(time.Now().Add(d))
	h := make([]byte, radius.HeaderLen)
	if _, err := io.ReadFull(c, h); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint16(h[2:4]))
	copy(b, h)
	_, err := io.ReadFull(c, b[radius.HeaderLen:])
	return b, err
}

// With Clients, a radius+tcp connection is verified with the secret of
// the client it was accepted from; another client's secret closes it;
// an unknown source is closed at once, counted and logged.
func TestServerClients(t *testing.T) {
	ln, err := Listen("radius+tcp://127.0.0.1:0", transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var lines lineBuffer
	srv, err := NewServer(ln, SchemeTCP, ServerConfig{Clients: testClients, Logger: lines.logger()})
	if err != nil {
		t.Fatalf("NewServer with Clients and no Secret: %v", err)
	}
	go srv.Serve()
	defer mustClose(t, srv)
	logged := serve.Count(serve.KindUnknownClient)
	addr := ln.Addr().String()

	a := tcpFrom(t, srcA, addr)
	req, _, _ := radius.EncodeRequest(accessReq("alice"), 1, []byte("secret-a"))
	a.Write(req)
	ans, err := readPacket(a, 5*time.Second)
	if err != nil {
		t.Fatalf("client a, its own secret: no answer: %v (stats %+v)", err, srv.Stats())
	}
	if err := radius.VerifyResponse(ans, radius.Authenticator(req), []byte("secret-a"), true); err != nil {
		t.Fatalf("client a's answer is not signed with its secret: %v", err)
	}

	b := tcpFrom(t, srcB, addr)
	reqB, _, _ := radius.EncodeRequest(accessReq("bob"), 2, []byte("secret-a"))
	b.Write(reqB)
	if _, err := readPacket(b, 5*time.Second); err != io.EOF {
		t.Fatalf("client b with client a's secret: read %v, want the connection closed (EOF)", err)
	}

	u := tcpFrom(t, srcUnknown, addr)
	if _, err := readPacket(u, 5*time.Second); err != io.EOF {
		t.Fatalf("unknown source: read %v, want the connection closed at once (EOF)", err)
	}
	waitFor(t, "the unknown source counted", func() bool { return srv.Stats().UnknownClient == 1 })
	st := srv.Stats()
	if st.Received != 1 || st.BadAuth != 1 || st.Connections != 2 {
		t.Fatalf("stats %+v: want 1 received, 1 bad auth, 2 connections accepted (the unknown one refused)", st)
	}
	if serve.Count(serve.KindUnknownClient)-logged != 1 {
		t.Errorf("log events unknown_client +%d, want +1", serve.Count(serve.KindUnknownClient)-logged)
	}
	if out := lines.String(); !strings.Contains(out, "closed at once: its source is no configured client") || !strings.Contains(out, "source="+srcUnknown.String()) {
		t.Errorf("log does not name the unknown source:\n%s", out)
	}
}

// Shutdown answers every request read, those waiting for a handler
// included, before it returns; Close would drop the waiting ones.
func TestUDPServerShutdownAnswersWhatItRead(t *testing.T) {
	g := &gate{ch: make(chan struct{})}
	srv, c := startUDP(t, ServerConfig{Handler: g.handler, MaxInFlight: 1, MaxQueued: 4})
	var auths [][radius.AuthenticatorLen]byte
	for id := range byte(3) {
		req, auth, _ := radius.EncodeRequest(accessReq("alice"), id, testSecret)
		auths = append(auths, auth)
		c.Write(req)
	}
	waitFor(t, "a handler running, two waiting", func() bool { return g.waiting.Load() == 1 && srv.Stats().Received == 3 })
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- srv.Shutdown(ctx)
	}()
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with requests not answered", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(g.ch)
	for range 3 {
		ans, err := readAnswer(c, 5*time.Second)
		if err != nil {
			t.Fatalf("an answer missing after Shutdown: %v (stats %+v)", err, srv.Stats())
		}
		if err := radius.VerifyResponse(ans, auths[radius.Identifier(ans)], testSecret, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// SetClients changes a stream server's secrets in place: a connection
// accepted before keeps its secret; a new one is verified with the new
// secret, and a new one on the old secret fails; the NAS counters take
// the new names; a change it refuses changes nothing.
func TestServerSetClients(t *testing.T) {
	ln, err := Listen("radius+tcp://127.0.0.1:0", transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(ln, SchemeTCP, ServerConfig{Clients: testClients})
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
	before := tcpFrom(t, srcA, addr)
	if err := ask(before, 1, "secret-a"); err != nil {
		t.Fatalf("before the change: %v", err)
	}

	if err := srv.SetClients(nil, nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("SetClients with neither secret nor clients: %v, want ErrConfig", err)
	}
	renamed := func(a netip.Addr) (Client, bool) {
		if a == srcA {
			return Client{Name: "a2", Secret: []byte("secret-a2")}, true
		}
		return Client{}, false
	}
	if err := srv.SetClients(nil, renamed); err != nil {
		t.Fatal(err)
	}
	if err := ask(before, 2, "secret-a"); err != nil {
		t.Errorf("the connection accepted before, on its old secret: %v", err)
	}
	if err := ask(tcpFrom(t, srcA, addr), 3, "secret-a2"); err != nil {
		t.Errorf("a new connection on the new secret: %v", err)
	}
	closed := func(err error) bool { return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) }
	if err := ask(tcpFrom(t, srcA, addr), 4, "secret-a"); !closed(err) {
		t.Errorf("a new connection on the old secret: %v, want it closed", err)
	}
	if err := ask(tcpFrom(t, srcB, addr), 5, "secret-b"); !closed(err) {
		t.Errorf("a client removed by the change: %v, want it closed", err)
	}
	st := srv.Stats()
	if len(st.NAS) != 1 || st.NAS[0].Name != "a2" || st.NAS[0].Received != 3 {
		t.Errorf("NAS %+v: want one row, named a2, 3 received", st.NAS)
	}
}

// SetClients changes a UDP server's secrets for every datagram read
// after it; a request read before is answered with the secret it was
// verified with.
func TestUDPServerSetClients(t *testing.T) {
	g := &gate{ch: make(chan struct{})}
	srv, c := startUDP(t, ServerConfig{Secret: []byte("old"), Handler: g.handler})
	first, _, _ := radius.EncodeRequest(accessReq("alice"), 1, []byte("old"))
	c.Write(first)
	waitFor(t, "the first request in its handler", func() bool { return g.waiting.Load() == 1 })

	if err := srv.SetClients(nil, nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("SetClients with neither secret nor clients: %v, want ErrConfig", err)
	}
	if err := srv.SetClients([]byte("new"), nil); err != nil {
		t.Fatal(err)
	}
	close(g.ch)
	ans, err := readAnswer(c, 5*time.Second)
	if err != nil {
		t.Fatalf("the request read before the change: %v", err)
	}
	if err := radius.VerifyResponse(ans, radius.Authenticator(first), []byte("old"), true); err != nil {
		t.Errorf("the request read before the change is not answered with its secret: %v", err)
	}

	stale, _, _ := radius.EncodeRequest(accessReq("alice"), 2, []byte("old"))
	c.Write(stale)
	waitFor(t, "the old secret failing verification", func() bool { return srv.Stats().BadAuth == 1 })
	fresh, _, _ := radius.EncodeRequest(accessReq("alice"), 3, []byte("new"))
	c.Write(fresh)
	ans, err = readAnswer(c, 5*time.Second)
	if err != nil {
		t.Fatalf("the new secret: %v", err)
	}
	if err := radius.VerifyResponse(ans, radius.Authenticator(fresh), []byte("new"), true); err != nil {
		t.Errorf("the new secret's answer: %v", err)
	}
}

// Shutdown stops accepting at once and closes the connections that owe
// nothing at once, and those that owe answers once they are written; it
// returns when they are closed. Past its ctx, it closes those left and
// returns ctx's error.
func TestServerShutdown(t *testing.T) {
	for _, patient := range []bool{true, false} {
		ln, err := Listen("radius+tcp://127.0.0.1:0", transport.Options{})
		if err != nil {
			t.Fatal(err)
		}
		srv, err := NewServer(ln, SchemeTCP, ServerConfig{Secret: testSecret})
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- srv.Serve() }()
		addr := ln.Addr().String()
		c := tcpFrom(t, netip.MustParseAddr("127.0.0.1"), addr)
		ask := func(id byte) error {
			req, _, _ := radius.EncodeRequest(accessReq("alice"), id, testSecret)
			c.Write(req)
			_, err := readPacket(c, 5*time.Second)
			return err
		}
		if err := ask(1); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if !patient {
			cancel()
		}
		done := make(chan error, 1)
		go func() { done <- srv.Shutdown(ctx) }()
		if err := <-done; patient && err != nil {
			t.Errorf("Shutdown with an idle connection: %v", err)
		} else if !patient && !errors.Is(err, context.Canceled) {
			t.Errorf("Shutdown past its ctx: %v, want context.Canceled", err)
		}
		if _, err := readPacket(c, 5*time.Second); err == nil {
			t.Error("the connection left open past Shutdown")
		}
		if d, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			d.Close()
			t.Error("the listener open past Shutdown")
		}
		if err := <-served; err != nil {
			t.Errorf("Serve after Shutdown: %v", err)
		}
		cancel()
	}
}
