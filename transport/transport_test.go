package transport

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/internal/testhelp"
	"github.com/aaatp/aaatp/wire"
)

func TestParseURL(t *testing.T) {
	good := []struct {
		in   string
		want Endpoint
	}{
		{"tcp://127.0.0.1:3868", Endpoint{"tcp", "127.0.0.1", 3868}},
		{"TLS://aaa.example.net:5658", Endpoint{"tls", "aaa.example.net", 5658}},
		{"sctp://[::1]:3868", Endpoint{"sctp", "::1", 3868}},
		{"tcp://:0", Endpoint{"tcp", "", 0}},
		{"tcp://127.0.0.1:3868/", Endpoint{"tcp", "127.0.0.1", 3868}},
	}
	for _, g := range good {
		ep, err := ParseURL(g.in)
		require.NoError(t, err, g.in)
		assert.Equal(t, g.want, ep, g.in)
	}
	assert.Equal(t, "sctp://[::1]:3868", Endpoint{"sctp", "::1", 3868}.String())

	bad := []struct{ in, msg string }{
		{"udp://127.0.0.1:3868", `unknown scheme "udp"`},
		{"aaa://host:3868", `unknown scheme "aaa"`},
		{"127.0.0.1:3868", "unknown scheme"}, // parsed as scheme "127.0.0.1"? no: url.Parse fails or yields an odd scheme
		{"//127.0.0.1:3868", "no scheme"},
		{"tcp://127.0.0.1", "missing port"},
		{"tcp://127.0.0.1:", "missing port"},
		{"tcp://[::1]", "missing port"},
		{"tcp://127.0.0.1:99999", `bad port "99999"`},
		{"tcp://127.0.0.1:http", `invalid port`},
		{"tcp://127.0.0.1:3868/path", "only scheme://host:port"},
		{"tcp://127.0.0.1:3868?x=1", "only scheme://host:port"},
		{"tcp://user@127.0.0.1:3868", "only scheme://host:port"},
		{"tcp:opaque", "only scheme://host:port"},
	}
	for _, b := range bad {
		_, err := ParseURL(b.in)
		require.Error(t, err, b.in)
		if b.in != "127.0.0.1:3868" {
			assert.Contains(t, err.Error(), b.msg, b.in)
		}
	}
}

func TestOptionsDefaults(t *testing.T) {
	o := Options{}.withDefaults()
	assert.False(t, o.NoDelay, "Nagle stays on by default (RFC 3539 3.2)")
	assert.Equal(t, 5*time.Second, o.DialTimeout)
	assert.Equal(t, 10*time.Second, o.WriteTimeout)
	assert.Equal(t, uint32(wire.DefaultMaxMessageLen), o.MaxMessageLen)
	assert.Equal(t, uint16(10), o.SCTPStreams)
	assert.Equal(t, uint16(4), o.SCTPInitAttempts)
	assert.Equal(t, 2*time.Second, o.SCTPInitTimeout)
	o = Options{MaxMessageLen: 1 << 30, SCTPInitTimeout: time.Hour, WriteTimeout: -1}.withDefaults()
	assert.Equal(t, uint32(wire.MaxMessageLen), o.MaxMessageLen)
	assert.Equal(t, 65535*time.Millisecond, o.SCTPInitTimeout)
	assert.Equal(t, 10*time.Second, o.WriteTimeout, "write deadlines cannot be switched off")
}

// pair returns the two ends of a fresh connection over url's transport.
func pair(t *testing.T, url string, srvOpts, cliOpts Options) (srv, cli Conn) {
	t.Helper()
	ln, err := Listen(url, srvOpts)
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	ep, err := ParseURL(url)
	require.NoError(t, err)
	cli, err = Dial(testCtx(t), ep.Scheme+"://"+ln.Addr().String(), cliOpts)
	require.NoError(t, err)
	t.Cleanup(func() { cli.Close() })
	select {
	case srv = <-accepted:
		require.NotNil(t, srv)
	case <-time.After(10 * time.Second):
		t.Fatal("no connection accepted")
	}
	t.Cleanup(func() { srv.Close() })
	return srv, cli
}

// exchange sends a batch of n messages each way in one WriteMessages and
// checks every byte on arrival.
func exchange(t *testing.T, a, b Conn, n int) {
	t.Helper()
	batch := func(base uint32) [][]byte {
		msgs := make([][]byte, n)
		for i := range msgs {
			msgs[i] = testMsg(20+4*(i%50), 272, base+uint32(i))
		}
		return msgs
	}
	errc := make(chan error, 2)
	send := func(c Conn, msgs [][]byte) { errc <- c.WriteMessages(msgs...) }
	check := func(c Conn, want [][]byte) {
		for i, w := range want {
			got, err := c.ReadMessage()
			require.NoError(t, err, "message %d", i)
			require.Equal(t, w, got, "message %d", i)
		}
	}
	ab, ba := batch(1), batch(100000)
	go send(a, ab)
	go send(b, ba)
	check(b, ab)
	check(a, ba)
	require.NoError(t, <-errc)
	require.NoError(t, <-errc)
}

func TestTCPExchange(t *testing.T) {
	srv, cli := pair(t, "tcp://127.0.0.1:0", Options{}, Options{})
	assert.Equal(t, "tcp", srv.Network())
	assert.Equal(t, "tcp", cli.Network())
	assert.Equal(t, cli.LocalAddr().String(), srv.RemoteAddr().String())
	exchange(t, cli, srv, 1)
	exchange(t, cli, srv, 1000)
	exchange(t, srv, cli, 3)
}

func TestTLSExchange(t *testing.T) {
	p := testhelp.NewPKI(t)
	srvTLS, err := ServerTLSConfig(p.ServerCert, p.ServerKey, p.CAFile)
	require.NoError(t, err)
	cliTLS, err := ClientTLSConfig(p.CAFile, p.ClientCert, p.ClientKey, "")
	require.NoError(t, err)
	srv, cli := pair(t, "tls://127.0.0.1:0", Options{TLS: srvTLS}, Options{TLS: cliTLS})
	assert.Equal(t, "tls", srv.Network())
	exchange(t, cli, srv, 1000)
	exchange(t, srv, cli, 1)
	// The server saw the client's certificate.
	st := streamOf(srv).c.(interface{ ConnectionState() tlsState }).ConnectionState()
	require.Len(t, st.PeerCertificates, 1)
	assert.Equal(t, "client.example.net", st.PeerCertificates[0].Subject.CommonName)
	assert.GreaterOrEqual(t, st.Version, uint16(0x0303), "TLS 1.2 or later")
}

func TestTLSClientWithoutCertRejected(t *testing.T) {
	p := testhelp.NewPKI(t)
	srvTLS, err := ServerTLSConfig(p.ServerCert, p.ServerKey, p.CAFile)
	require.NoError(t, err)
	cliTLS, err := ClientTLSConfig(p.CAFile, "", "", "")
	require.NoError(t, err)
	ln, err := Listen("tls://127.0.0.1:0", Options{TLS: srvTLS})
	require.NoError(t, err)
	defer ln.Close()
	srvErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			srvErr <- err
			return
		}
		defer c.Close()
		_, err = c.ReadMessage()
		srvErr <- err
	}()
	cli, err := Dial(testCtx(t), "tls://"+ln.Addr().String(), Options{TLS: cliTLS})
	if err == nil {
		// TLS 1.3: the client finishes its handshake before the server
		// checks the certificate; the rejection shows on the next read.
		defer cli.Close()
		_, err = cli.ReadMessage()
	}
	require.Error(t, err)
	select {
	case err := <-srvErr:
		require.Error(t, err)
		assert.Contains(t, err.Error(), "certificate")
	case <-time.After(10 * time.Second):
		t.Fatal("server did not reject the client")
	}
}

func TestTLSWrongServerCA(t *testing.T) {
	p := testhelp.NewPKI(t)
	srvTLS, err := ServerTLSConfig(p.ServerCert, p.ServerKey, "")
	require.NoError(t, err)
	cliTLS, err := ClientTLSConfig(p.OtherCAFile, "", "", "")
	require.NoError(t, err)
	ln, err := Listen("tls://127.0.0.1:0", Options{TLS: srvTLS})
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			_, _ = c.ReadMessage()
			c.Close()
		}
	}()
	_, err = Dial(testCtx(t), "tls://"+ln.Addr().String(), Options{TLS: cliTLS})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "certificate")
}

func TestTLSConfigErrors(t *testing.T) {
	p := testhelp.NewPKI(t)
	_, err := ServerTLSConfig(p.Dir+"/missing.pem", p.ServerKey, "")
	assert.Error(t, err)
	_, err = ServerTLSConfig(p.ServerCert, p.ServerKey, p.ServerKey) // not a certificate
	assert.ErrorContains(t, err, "no PEM certificate")
	_, err = ClientTLSConfig(p.Dir+"/missing.pem", "", "", "")
	assert.Error(t, err)
	cfg, err := ClientTLSConfig("", "", "", "peer.example.net")
	require.NoError(t, err)
	assert.Equal(t, uint16(0x0303), cfg.MinVersion)
	_, err = Listen("tls://127.0.0.1:0", Options{})
	assert.ErrorContains(t, err, "Options.TLS")
}

func tcpNoDelay(t *testing.T, c Conn) int {
	t.Helper()
	tc := tcpOf(streamOf(c).c)
	require.NotNil(t, tc)
	rc, err := tc.SyscallConn()
	require.NoError(t, err)
	var v int
	var serr error
	require.NoError(t, rc.Control(func(fd uintptr) {
		v, serr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_NODELAY)
	}))
	require.NoError(t, serr)
	return v
}

func TestNagleDefaultOn(t *testing.T) {
	srv, cli := pair(t, "tcp://127.0.0.1:0", Options{}, Options{})
	assert.Equal(t, 0, tcpNoDelay(t, cli), "dialed socket: Nagle on (TCP_NODELAY 0)")
	assert.Equal(t, 0, tcpNoDelay(t, srv), "accepted socket: Nagle on (TCP_NODELAY 0)")

	srv, cli = pair(t, "tcp://127.0.0.1:0", Options{NoDelay: true}, Options{NoDelay: true})
	assert.Equal(t, 1, tcpNoDelay(t, cli))
	assert.Equal(t, 1, tcpNoDelay(t, srv))

	p := testhelp.NewPKI(t)
	srvTLS, err := ServerTLSConfig(p.ServerCert, p.ServerKey, "")
	require.NoError(t, err)
	cliTLS, err := ClientTLSConfig(p.CAFile, "", "", "")
	require.NoError(t, err)
	srv, cli = pair(t, "tls://127.0.0.1:0", Options{TLS: srvTLS}, Options{TLS: cliTLS})
	assert.Equal(t, 0, tcpNoDelay(t, cli), "TLS over TCP: Nagle on")
	assert.Equal(t, 0, tcpNoDelay(t, srv), "TLS over TCP: Nagle on")
}

func TestWriteTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	srv, cli := pair(t, "tcp://127.0.0.1:0", Options{}, Options{WriteTimeout: timeout})
	_ = srv // never reads
	require.NoError(t, streamOf(cli).c.(*net.TCPConn).SetWriteBuffer(4096))
	require.NoError(t, streamOf(srv).c.(*net.TCPConn).SetReadBuffer(4096))
	batch := make([][]byte, 64)
	for i := range batch {
		batch[i] = testMsg(1024, 272, uint32(i))
	}
	deadline := time.Now().Add(15 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		start := time.Now()
		if err = cli.WriteMessages(batch...); err != nil {
			assert.Less(t, time.Since(start), timeout+2*time.Second, "the failing write returned long after its deadline")
			break
		}
	}
	require.Error(t, err, "writes to a peer that never reads kept succeeding")
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout())
}

func TestWriteMessagesLeavesCallerSliceIntact(t *testing.T) {
	srv, cli := pair(t, "tcp://127.0.0.1:0", Options{}, Options{})
	msgs := [][]byte{testMsg(24, 272, 1), testMsg(28, 272, 2), testMsg(32, 272, 3)}
	orig := [][]byte{bytes.Clone(msgs[0]), bytes.Clone(msgs[1]), bytes.Clone(msgs[2])}
	require.NoError(t, cli.WriteMessages(msgs...))
	for i := range msgs {
		assert.Equal(t, orig[i], msgs[i], "net.Buffers must not consume the caller's slice")
		got, err := srv.ReadMessage()
		require.NoError(t, err)
		assert.Equal(t, orig[i], got)
	}
	require.NoError(t, cli.WriteMessages()) // empty batch is a no-op
}

// pipeConn returns a Conn reading what the returned function writes; the
// writer end is closed after writing.
func pipeConn(t *testing.T, opts Options, data []byte) Conn {
	t.Helper()
	a, b := net.Pipe()
	c := NewStreamConn(a, "pipe", opts)
	t.Cleanup(func() { c.Close() })
	go func() {
		_, _ = b.Write(data)
		b.Close()
	}()
	return c
}

// badFrame is a byte stream that ReadMessage must refuse with wantErr.
type badFrame struct {
	name    string
	data    []byte
	maxLen  uint32
	wantErr error
	reason  string
}

// badFrames returns the bad streams every frame reader is tested with, and
// a good message.
func badFrames() (good []byte, tests []badFrame) {
	good = testMsg(64, 280, 7)
	return good, []badFrame{
		{"version 2", badHeader(2, 64), 0, wire.ErrBadFrame, "version 2"},
		{"length 12", badHeader(1, 12), 0, wire.ErrBadFrame, "length 12 below the 20-byte header"},
		{"length above max", badHeader(1, 0xfffffc), 0, wire.ErrBadFrame, "length 16777212 above the maximum 65536"},
		{"length above a small max", badHeader(1, 128), 64, wire.ErrBadFrame, "above the maximum 64"},
		{"truncated body then EOF", append(badHeader(1, 64), make([]byte, 10)...), 0, io.ErrUnexpectedEOF, ""},
		{"truncated large body then EOF", append(badHeader(1, 60000), make([]byte, 20000)...), 0, io.ErrUnexpectedEOF, ""},
		{"header only then EOF", badHeader(1, 64), 0, io.ErrUnexpectedEOF, ""},
		{"truncated header then EOF", good[:11], 0, io.ErrUnexpectedEOF, ""},
		{"clean EOF", nil, 0, io.EOF, ""},
	}
}

// badHeader is a message header with the given version and length.
func badHeader(version byte, length uint32) []byte {
	h := testMsg(20, 280, 1)
	h[0] = version
	h[1], h[2], h[3] = byte(length>>16), byte(length>>8), byte(length)
	return h
}

func TestReadMessageBadFrames(t *testing.T) {
	good, tests := badFrames()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := pipeConn(t, Options{MaxMessageLen: tt.maxLen}, tt.data)
			msg, err := c.ReadMessage()
			assert.Nil(t, msg)
			require.ErrorIs(t, err, tt.wantErr)
			if tt.reason != "" {
				assert.Contains(t, err.Error(), tt.reason)
			}
		})
	}

	// A good message followed by garbage: the good one is delivered.
	c := pipeConn(t, Options{}, append(bytes.Clone(good), badHeader(1, 12)...))
	msg, err := c.ReadMessage()
	require.NoError(t, err)
	assert.Equal(t, good, msg)
	_, err = c.ReadMessage()
	assert.ErrorIs(t, err, wire.ErrBadFrame)
}

// A header claiming 16 MiB must not cost 16 MiB: the length is validated
// before the body is allocated.
func TestReadMessageDoesNotAllocateBogusLength(t *testing.T) {
	h := testMsg(20, 280, 1)
	h[1], h[2], h[3] = 0xff, 0xff, 0xfc
	c := pipeConn(t, Options{}, h)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := c.ReadMessage()
	runtime.ReadMemStats(&after)
	require.ErrorIs(t, err, wire.ErrBadFrame)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "allocated %d bytes", after.TotalAlloc-before.TotalAlloc)
}

func TestBadConnectionDoesNotAffectOther(t *testing.T) {
	ln, err := Listen("tcp://127.0.0.1:0", Options{})
	require.NoError(t, err)
	defer ln.Close()

	var wg sync.WaitGroup
	results := make(chan error, 2)
	serve := func(c Conn) {
		defer wg.Done()
		defer c.Close()
		for {
			msg, err := c.ReadMessage()
			if err != nil {
				results <- err
				return
			}
			if err := c.WriteMessages(msg); err != nil { // echo
				results <- err
				return
			}
		}
	}
	go func() {
		for i := 0; i < 2; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go serve(c)
		}
	}()

	ctx := testCtx(t)
	good, err := Dial(ctx, "tcp://"+ln.Addr().String(), Options{})
	require.NoError(t, err)
	require.NoError(t, good.WriteMessages(testMsg(40, 272, 1)))
	_, err = good.ReadMessage()
	require.NoError(t, err)

	bad, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	_, err = bad.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	require.NoError(t, err)
	select {
	case err := <-results:
		assert.ErrorIs(t, err, wire.ErrBadFrame, "the bad connection is dropped with a reason")
		t.Logf("bad peer dropped: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("bad connection not dropped")
	}
	// The server closed the bad connection.
	_ = bad.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = bad.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF)
	bad.Close()

	// The good one still works.
	for i := 0; i < 10; i++ {
		m := testMsg(20+4*i, 272, uint32(100+i))
		require.NoError(t, good.WriteMessages(m))
		got, err := good.ReadMessage()
		require.NoError(t, err)
		require.Equal(t, m, got)
	}
	good.Close()
	select {
	case err := <-results:
		assert.ErrorIs(t, err, io.EOF)
	case <-time.After(10 * time.Second):
		t.Fatal("good connection's server did not see EOF")
	}
	wg.Wait()
}

func TestCloseUnblocksReadAndIsIdempotent(t *testing.T) {
	srv, cli := pair(t, "tcp://127.0.0.1:0", Options{}, Options{})
	_ = srv
	done := make(chan error, 1)
	go func() { _, err := cli.ReadMessage(); done <- err }()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, cli.Close())
	select {
	case err := <-done:
		assert.ErrorIs(t, err, net.ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock ReadMessage")
	}
	assert.NoError(t, cli.Close(), "second Close returns the first's result")
}

func TestListenerClose(t *testing.T) {
	ln, err := Listen("tcp://127.0.0.1:0", Options{})
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() { _, err := ln.Accept(); errc <- err }()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, ln.Close())
	select {
	case err := <-errc:
		assert.ErrorIs(t, err, net.ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Accept")
	}
}

func TestDialErrors(t *testing.T) {
	ctx := testCtx(t)
	_, err := Dial(ctx, "udp://127.0.0.1:1", Options{})
	assert.ErrorContains(t, err, "unknown scheme")
	_, err = Dial(ctx, "tcp://127.0.0.1:0", Options{})
	assert.ErrorContains(t, err, "non-zero port")
	// A port nobody listens on: refused, not hung.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	_, err = Dial(ctx, "tcp://"+addr, Options{})
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
}

func TestSCTP(t *testing.T) {
	ln, err := Listen("sctp://127.0.0.1:0", Options{})
	if errors.Is(err, ErrSCTPUnsupported) {
		assert.Contains(t, err.Error(), "SCTP is not supported by this kernel")
		t.Skip(err)
	}
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	cli, err := Dial(testCtx(t), "sctp://"+ln.Addr().String(), Options{})
	require.NoError(t, err)
	defer cli.Close()
	var srv Conn
	select {
	case srv = <-accepted:
		require.NotNil(t, srv)
	case <-time.After(10 * time.Second):
		t.Fatal("no SCTP connection accepted")
	}
	defer srv.Close()
	assert.Equal(t, "sctp", cli.Network())
	exchange(t, cli, srv, 1000)
	// Base protocol messages and application messages interleaved.
	exchange(t, srv, cli, 5)
	require.NoError(t, cli.WriteMessages(testMsg(24, 280, 9), testMsg(24, 272, 10), testMsg(24, 257, 11)))
	for _, hbh := range []uint32{9, 10, 11} {
		m, err := srv.ReadMessage()
		require.NoError(t, err)
		assert.Equal(t, hbh, wire.HopByHop(m))
	}
}

// ParseDialURL takes what ParseURL takes, but a peer to dial needs a host
// and a port other than 0.
func TestParseDialURL(t *testing.T) {
	if ep, err := ParseDialURL("tcp://10.0.0.1:3868"); err != nil || ep != (Endpoint{"tcp", "10.0.0.1", 3868}) {
		t.Errorf("tcp://10.0.0.1:3868: %v, %v", ep, err)
	}
	for _, u := range []string{"tcp://:3868", "tcp://10.0.0.1:0", "tls://[::]:0", "bogus://x"} {
		if _, err := ParseDialURL(u); err == nil {
			t.Errorf("%s: no error", u)
		}
	}
}
