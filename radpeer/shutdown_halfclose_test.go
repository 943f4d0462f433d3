package radpeer

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/transport"
	lradius "layeh.com/radius"
)

// A connection drained, by Shutdown or at the end of the grace of a
// secret SetClients changed, ends with a half-close: once its last
// answer is handed to the socket, the server shuts its writing side (a
// FIN behind the answers) and goes on reading and dropping what the
// client sends, so that a client still sending reads every answer owed,
// then an orderly end (io.EOF), at once, and not a reset. Here most of
// the answers are still in the server's socket, beyond the window of a
// client that has not read them yet, when the last one is written.
// Closed then, with the client's requests arriving, the socket would be
// reset and the answers it had not sent yet thrown away; kept open for
// the linger without the FIN, the client would see no end until the
// linger passes and the socket is closed, reset by what it still sends.
func TestServerShutdownHalfClosesADrainedConnection(t *testing.T) {
	t.Run("shutdown", func(t *testing.T) { testHalfClose(t, false) })
	t.Run("secret-grace-ended", func(t *testing.T) { testHalfClose(t, true) })
}

func testHalfClose(t *testing.T, rotate bool) {
	hold := make(chan struct{})
	var held atomic.Int32
	big := func() lradius.Attributes {
		var attrs lradius.Attributes
		for range 16 { // about 4000 bytes of Reply-Message
			attrs.Add(18, make([]byte, 240))
		}
		return attrs
	}
	h := func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
		switch u, _ := radius.Attr(raw, radius.AttrUserName); string(u) {
		case "carol":
			held.Add(1)
			<-hold
			return lradius.CodeAccessAccept, big()
		case "bulk":
			return lradius.CodeAccessAccept, big()
		}
		return AcceptAll(ctx, req, raw)
	}
	ln, err := Listen("radius+tcp://127.0.0.1:0", transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(ln, SchemeTCP, ServerConfig{Secret: testSecret, Handler: h, SecretGrace: 10 * time.Millisecond, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	defer mustClose(t, srv)
	// A receive buffer of the client's own, whatever the system's
	// default: a window of some 32 KiB, that autotuning does not grow.
	// Not much smaller: under the server's MSS, Linux would send the
	// rest of the answers only when a zero-window probe fires, and each
	// request arriving puts the probe off.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 32<<10) })
	}}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(signedRequest(t, 1, "alice")); err != nil {
		t.Fatal(err)
	}
	if _, err := readPacket(c, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// 64 answers of 4000 bytes, which the NAS does not read yet: far
	// more than its receive window, so that most stay in the server's
	// socket; and one owed when Shutdown begins.
	owed := map[byte][]byte{}
	for id := byte(10); id < 74; id++ {
		owed[id] = signedRequest(t, id, "bulk")
		if _, err := c.Write(owed[id]); err != nil {
			t.Fatal(err)
		}
	}
	owed[2] = signedRequest(t, 2, "carol")
	if _, err := c.Write(owed[2]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "carol in her handler", func() bool { return held.Load() == 1 })
	waitFor(t, "the other answers written", func() bool { return srv.Stats().Answered == 65 })

	done := make(chan error, 1)
	if rotate {
		if err := srv.SetClients([]byte("rotated"), nil); err != nil {
			t.Fatal(err)
		}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		go func() { done <- srv.Shutdown(ctx) }()
	}
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

	// The NAS does not know: it keeps sending requests, which are
	// always on their way to the server when its last answer is written.
	var more [][]byte
	for id := 100; id < 256; id++ {
		more = append(more, signedRequest(t, byte(id), "dave"))
	}
	var flood sync.WaitGroup
	var sent atomic.Int32
	stop := make(chan struct{})
	flood.Add(1)
	go func() {
		defer flood.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			c.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := c.Write(more[i%len(more)]); err != nil {
				return // the server's full close
			}
			sent.Add(1)
			time.Sleep(200 * time.Microsecond)
		}
	}()
	var once sync.Once
	stopFlood := func() {
		once.Do(func() { close(stop) })
		flood.Wait()
	}
	defer stopFlood()
	waitFor(t, "the NAS sending", func() bool { return sent.Load() >= 20 })

	close(hold)
	// The last answer is written and the server's end queued behind
	// it, while the NAS's requests keep coming; then the NAS reads.
	time.Sleep(100 * time.Millisecond)
	for len(owed) > 0 {
		ans, err := readPacket(c, 2*time.Second)
		if err != nil {
			t.Fatalf("%d answers owed when the drain began were lost (%v): the connection was not shut in order", len(owed), err)
		}
		req, ok := owed[radius.Identifier(ans)]
		if !ok {
			t.Fatalf("answer %d: to no request owed an answer", radius.Identifier(ans))
		}
		if err := radius.VerifyResponse(ans, radius.Authenticator(req), testSecret, true); err != nil {
			t.Fatalf("answer %d: %v", radius.Identifier(ans), err)
		}
		delete(owed, radius.Identifier(ans))
	}
	// Then the end, at once: a FIN, sent before the linger after which
	// the server closes for good.
	start := time.Now()
	c.SetReadDeadline(start.Add(drainLinger / 2))
	var b [1]byte
	n, err := c.Read(b[:])
	var ne net.Error
	switch {
	case err == io.EOF:
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("no end of the connection within %v of the last answer: its writing side was not shut", drainLinger/2)
	case errors.Is(err, syscall.ECONNRESET):
		t.Fatalf("the connection was reset, not shut in order: %v", err)
	default:
		t.Fatalf("after the last answer: %d bytes, %v; want io.EOF", n, err)
	}
	t.Logf("EOF %v after the last answer; %d requests sent during the drain", time.Since(start), sent.Load())
	stopFlood()
	c.Close()
	if rotate {
		waitFor(t, "the connection closed", func() bool { return srv.Stats().Open == 0 })
	} else if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}
