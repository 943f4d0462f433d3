package transport

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/aaatp/aaatp/internal/testhelp"
	"github.com/stretchr/testify/require"
)

// Close over TLS does not wait for a peer that does not read: its
// close_notify is given tlsCloseWait, then the socket is closed under it.
// Without the bound, Close waited the 5 s Go gives that alert (a server
// closing many such connections, one after another, took as many times
// 5 s). Over net.Pipe a write waits until the other end reads.
func TestTLSCloseDoesNotWaitForAPeerThatDoesNotRead(t *testing.T) {
	p := testhelp.NewPKI(t)
	srvTLS, err := ServerTLSConfig(p.ServerCert, p.ServerKey, p.CAFile)
	require.NoError(t, err)
	cliTLS, err := ClientTLSConfig(p.CAFile, p.ClientCert, p.ClientKey, "server.example.net")
	require.NoError(t, err)
	a, b := net.Pipe()
	defer b.Close()
	srv, cli := tls.Server(a, srvTLS), tls.Client(b, cliTLS)
	errc := make(chan error, 1)
	go func() { errc <- cli.Handshake() }()
	require.NoError(t, srv.Handshake())
	require.NoError(t, <-errc)

	c := NewStreamConn(srv, "tls", Options{}) // the client reads nothing from now on
	start := time.Now()
	done := make(chan struct{})
	go func() {
		c.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waiting after 10 s")
	}
	if d := time.Since(start); d > tlsCloseWait+time.Second {
		t.Fatalf("Close took %v: it waited for a peer that does not read", d)
	}
	// The socket is closed: the client's end sees it.
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := b.Read(make([]byte, 1)); err == nil {
		t.Fatal("the socket beneath is still open")
	}
}
