package radpeer

import (
	"bytes"
	"log/slog"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aaatp/aaatp/radius"
)

// The RFC 5080 duplicate cache: a copy of a request being handled is
// dropped, a copy of one answered gets the same answer, and the handler
// runs once.
func TestUDPServerDuplicateCache(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{ch: make(chan struct{})}
	srv, err := NewUDPServer(pc, ServerConfig{Secret: testSecret, Handler: g.handler})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	defer mustClose(t, srv)
	c, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req, _, _ := radius.EncodeRequest(accessReq("alice"), 9, testSecret)
	c.Write(req)
	for g.waiting.Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	c.Write(req) // while the first is handled
	deadline := time.Now().Add(5 * time.Second)
	for srv.Stats().InProgress != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v", srv.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	close(g.ch)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	first := append([]byte(nil), buf[:n]...)
	c.Write(req) // after the answer
	n, err = c.Read(buf)
	if err != nil || !bytes.Equal(buf[:n], first) {
		t.Fatalf("cached answer %x, %v; first %x", buf[:n], err, first)
	}
	if st := srv.Stats(); g.waiting.Load() != 1 || st.Received != 1 || st.Resent != 1 || st.Answered != 2 || st.Cached != 1 {
		t.Fatalf("handler ran %d times, stats %+v", g.waiting.Load(), st)
	}
	// Entries expire after the TTL, and the cache holds at most max.
	srv.mu.Lock()
	srv.now = func() time.Time { return time.Now().Add(DefaultDupTTL) }
	srv.dup.maxEntries = 2
	srv.mu.Unlock()
	for i := range 5 {
		r, _, _ := radius.EncodeRequest(acctReq("s"), byte(i), testSecret)
		c.Write(r)
		if _, err := c.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	srv.mu.Lock()
	cached := srv.dup.len()
	srv.mu.Unlock()
	if cached > 2 {
		t.Fatalf("%d entries cached, bound 2", cached)
	}
}

// failingPacketConn fails its first reads, as a socket with an error
// queued or no memory for a buffer would.
type failingPacketConn struct {
	net.PacketConn
	fails atomic.Int32
}

func (f *failingPacketConn) ReadFrom(b []byte) (int, net.Addr, error) {
	if f.fails.Add(-1) >= 0 {
		return 0, nil, &net.OpError{Op: "read", Net: "udp", Err: syscall.ENOBUFS}
	}
	return f.PacketConn.ReadFrom(b)
}

// A failed read does not end the service: the old Serve returned on it
// and nobody read the socket again.
func TestUDPServerReadsOnAfterAFailedRead(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fpc := &failingPacketConn{PacketConn: pc}
	fpc.fails.Store(5)
	srv, err := NewUDPServer(fpc, ServerConfig{Secret: testSecret, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	c, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req, _, _ := radius.EncodeRequest(accessReq("alice"), 3, testSecret)
	c.Write(req)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 4096)); err != nil {
		t.Fatalf("no answer after 5 failed reads: %v", err)
	}
	mustClose(t, srv)
	if err := <-served; err != nil {
		t.Fatalf("Serve after Close: %v", err)
	}
}
