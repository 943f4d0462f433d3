package peer

import (
	"bytes"
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/internal/testhelp"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/wire"
)

// Real sockets on loopback, outside synctest bubbles, every wait bounded.

// writeCounts returns how many writer goroutines c started and how many
// messages it wrote whole from the caller's goroutine.
func writeCounts(c *conn) (writers, inline int) {
	c.out.Mu.Lock()
	defer c.out.Mu.Unlock()
	return c.out.Writers, c.out.Inlined
}

// Over TCP, a DWR is written by the timer's goroutine that decides to send
// it and the DWA by the reader that read the DWR: an idle connection starts
// no writer goroutine. Requests and answers still go through the writer,
// which batches them.
func TestLoneMessagesWrittenInline(t *testing.T) {
	s := startServer(t, "tcp://127.0.0.1:0", nil)
	p := dialOkay(t, "tcp://"+s.Addr().String(), func(c *Config) {
		c.Watchdog.Twinit = 6 * time.Second
		c.Watchdog.Rand = fixedLow{} // Tw = 4 s
	})
	cc := p.cur.Load()
	require.NotNil(t, cc)
	require.True(t, cc.out.Inlines(), "plain TCP writes without waiting")
	require.Eventually(t, func() bool { return p.Stats().DWAReceived >= 1 }, 10*time.Second, 10*time.Millisecond)
	require.Len(t, s.Peers(), 1)
	sc := s.Peers()[0].cur.Load()
	require.NotNil(t, sc)
	writers, inline := writeCounts(cc)
	assert.Zero(t, writers, "client: writer goroutines started")
	assert.Equal(t, int(p.Stats().DWRSent), inline, "client: DWRs written inline")
	writers, inline = writeCounts(sc)
	assert.Zero(t, writers, "server: writer goroutines started")
	assert.Equal(t, int(s.Peers()[0].Stats().DWRReceived), inline, "server: DWAs written inline")

	// One caller: each request is alone on the connection, and so is its
	// answer in the server's Handlers: written inline, as a rule. Not
	// always: the next request can reach a server Handler before the
	// goroutine that wrote the previous answer has let go of the writing
	// mark (the answer went out first; on a loaded machine that is
	// common), and then its answer queues for a writer, as does a DWR that
	// comes along. Without inline writes every request and every answer
	// went through a writer (TestInlineAnswerFreesBacklog checks the
	// server's rule exactly).
	cliWriters, cliBefore := writeCounts(cc)
	_, srvBefore := writeCounts(sc)
	srvDWAs := s.Peers()[0].Stats().DWRReceived
	const n = 40
	for range n {
		_, err := p.Request(bounded(t), acr())
		require.NoError(t, err)
	}
	writers, inline = writeCounts(cc)
	assert.LessOrEqual(t, writers-cliWriters, n/2, "client: writer goroutines started for %d lone requests", n)
	assert.GreaterOrEqual(t, inline-cliBefore, n/2, "client: requests written inline")
	require.Eventually(t, func() bool {
		_, i := writeCounts(sc)
		return uint64(i-srvBefore) > s.Peers()[0].Stats().DWRReceived-srvDWAs
	}, 5*time.Second, time.Millisecond, "server: no answer written inline")

	// Many callers: requests with company go through the writer, which
	// batches them.
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 20 {
				_, err := p.Request(bounded(t), acr())
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	writers, _ = writeCounts(cc)
	assert.Positive(t, writers, "client: concurrent requests reach the writer")
}

// A request alone on the connection is the caller's to write only when
// nothing is queued or being written: behind a busy writer it queues, and
// every byte arrives in order; once the writer is done, the next lone
// request is written inline again (and its bytes follow the others).
func TestLoneRequestKeepsOrder(t *testing.T) {
	a, far := tcpPair(t)
	defer far.Close()
	c := newConn(nil, a, "far")
	defer func() {
		c.close("test over")
		c.out.Close(true)
	}()
	var sent [][]byte
	for i := range 200 { // about 3 MB: the inline write fills the buffers, a writer takes the rest
		m := frame(16000, uint32(i), true)
		sent = append(sent, m)
		require.NoError(t, c.enqueueLone(m))
	}
	lone := frame(120, 1000, true)
	inline, err := enqueueRequest(c, lone, true)
	require.NoError(t, err)
	assert.False(t, inline, "a lone request went inline past a busy writer")
	sent = append(sent, lone)
	readInOrder(t, far, sent)
	waitWriterIdle(t, c)
	next := frame(120, 1001, true)
	inline, err = enqueueRequest(c, next, true)
	require.NoError(t, err)
	require.True(t, inline, "a lone request on an idle connection")
	with := frame(120, 1002, true)
	inline, err = enqueueRequest(c, with, false)
	require.NoError(t, err)
	assert.False(t, inline, "a request with company goes to the writer")
	for _, want := range [][]byte{next, with} {
		got, err := far.ReadMessage()
		require.NoError(t, err)
		require.True(t, bytes.Equal(want, got))
	}
}

// An answer written inline leaves the backlog at once: a reader paused at
// the limit reads again.
func TestInlineAnswerFreesBacklog(t *testing.T) {
	a, far := tcpPair(t)
	defer far.Close()
	p, err := newPeer(clientConfig("client.example.net"), RoleServer, "x", "far")
	require.NoError(t, err)
	c := newConn(nil, a, "far")
	c.p = p // for waitRoom's log and counter; no workers, no handler
	c.bp.Limit = 1
	defer func() {
		c.close("test over")
		c.out.Close(true)
	}()
	c.out.Held(false) // the one request the limit allows, in a Handler
	resumed := make(chan struct{})
	go func() {
		c.waitRoom()
		close(resumed)
	}()
	require.Eventually(t, func() bool {
		c.out.Mu.Lock()
		defer c.out.Mu.Unlock()
		return c.bp.Waiting()
	}, 5*time.Second, time.Millisecond, "the reader pauses at the limit")
	ans := frame(100, 7, false)
	require.True(t, c.out.Answer(ans, false, false, true))
	_, inline := writeCounts(c)
	assert.Equal(t, 1, inline, "the only answer owed goes inline")
	select {
	case <-resumed:
	case <-time.After(5 * time.Second):
		t.Fatal("the reader stayed paused after the answer was written")
	}
	got, err := far.ReadMessage()
	require.NoError(t, err)
	assert.Equal(t, ans, got)
}

// TLS cannot write part of a record and come back later: every message
// goes through the writer goroutine as before.
func TestTLSWritesThroughWriter(t *testing.T) {
	dir := t.TempDir()
	cert, key := testhelp.SelfSigned(t, dir, "localhost")
	srvTLS, err := transport.ServerTLSConfig(cert, key, "")
	require.NoError(t, err)
	s := startServer(t, "tls://127.0.0.1:0", func(c *Config) { c.Transport.TLS = srvTLS })
	cliTLS, err := transport.ClientTLSConfig(cert, "", "", "localhost")
	require.NoError(t, err)
	p := dialOkay(t, "tls://"+s.Addr().String(), func(c *Config) { c.Transport.TLS = cliTLS })
	for range 3 {
		ans, err := p.Request(bounded(t), acr())
		require.NoError(t, err)
		rc, _ := message.ResultCodeOf(ans)
		assert.Equal(t, uint32(message.Success), rc)
	}
	cc := p.cur.Load()
	require.NotNil(t, cc)
	assert.False(t, cc.out.Inlines())
	writers, inline := writeCounts(cc)
	assert.Zero(t, inline)
	assert.GreaterOrEqual(t, writers, 1, "the writer sends the requests")
}

// frame is a valid Diameter message of n bytes (a multiple of 4) whose
// body is filler derived from hbh, so that any reordering or lost byte
// shows.
func frame(n int, hbh uint32, request bool) []byte {
	b := make([]byte, n)
	b[0] = 1
	b[1], b[2], b[3] = byte(n>>16), byte(n>>8), byte(n)
	if request {
		b[4] = wire.FlagRequest
	}
	b[5], b[6], b[7] = 0, 1, 16 // 272
	binary.BigEndian.PutUint32(b[12:], hbh)
	binary.BigEndian.PutUint32(b[16:], ^hbh)
	for i := wire.HeaderLen; i < n; i++ {
		b[i] = byte(i*7 + int(hbh))
	}
	return b
}

// tcpPair returns both ends of a loopback TCP connection, each with small
// fixed socket buffers (64 KiB asked, the kernel doubles it) so that a few
// dozen messages fill them. Much smaller buffers stall loopback TCP (a
// window below one 64 KiB segment), whoever writes.
func tcpPair(t *testing.T) (a, b transport.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	d := net.Dialer{Timeout: 10 * time.Second}
	ca, err := d.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	var cb net.Conn
	select {
	case cb = <-accepted:
		require.NotNil(t, cb)
	case <-time.After(10 * time.Second):
		t.Fatal("no connection accepted")
	}
	for _, c := range []net.Conn{ca, cb} {
		require.NoError(t, c.(*net.TCPConn).SetWriteBuffer(64<<10))
		require.NoError(t, c.(*net.TCPConn).SetReadBuffer(64<<10))
	}
	a, b = transport.NewStreamConn(ca, "tcp", transport.Options{}), transport.NewStreamConn(cb, "tcp", transport.Options{})
	t.Cleanup(func() { a.Close(); b.Close() })
	for _, c := range []transport.Conn{a, b} {
		_, ok := c.(transport.TryWriter)
		require.True(t, ok)
	}
	return a, b
}

// When the send buffer fills, what the inline write could not send, and
// everything after it, goes to one writer goroutine; the enqueuer never
// waits. After the far end reads, every byte arrives in order, and the
// next lone message is written inline again.
func TestInlineWriteHandsRestToWriter(t *testing.T) {
	a, far := tcpPair(t)
	defer far.Close()
	c := newConn(nil, a, "far")
	defer func() {
		c.close("test over")
		c.out.Close(true)
	}()

	var sent [][]byte
	start := time.Now()
	for i := range 3 {
		m := frame(100, uint32(i), true)
		sent = append(sent, m)
		require.NoError(t, c.enqueueLone(m))
	}
	for i := 3; i < 200; i++ { // about 3 MB: far more than both buffers
		m := frame(16000, uint32(i), true)
		sent = append(sent, m)
		require.NoError(t, c.enqueueLone(m))
	}
	assert.Less(t, time.Since(start), 2*time.Second, "enqueue waited for the far end to read")
	writers, inline := writeCounts(c)
	assert.Equal(t, 1, writers, "one writer took over when the buffer filled")
	assert.GreaterOrEqual(t, inline, 3, "the first small messages went inline")
	assert.Less(t, inline, len(sent))

	readInOrder(t, far, sent)

	// The writer exits once the queue is empty; then a lone message goes
	// inline again.
	waitWriterIdle(t, c)
	_, before := writeCounts(c)
	last := frame(200, 999, true)
	require.NoError(t, c.enqueueLone(last))
	writers, inline = writeCounts(c)
	assert.Equal(t, 1, writers)
	assert.Equal(t, before+1, inline)
	got, err := far.ReadMessage()
	require.NoError(t, err)
	assert.Equal(t, last, got)
}

// Each end's reader answers what it reads with two messages of its own (as
// a reader answers DWRs, but more), so both ends soon write more than
// the socket buffers hold. If a reader could block writing, both would end
// up blocked, each waiting for the other to read: a deadlock. Inline
// writes never wait, so everything arrives, intact and in order.
func TestNoDeadlockWhenBothSidesWrite(t *testing.T) {
	ta, tb := tcpPair(t)
	ca, cb := newConn(nil, ta, "b"), newConn(nil, tb, "a")
	const seeds, answered, size = 8, 100, 16000
	const total = seeds + 2*answered // what each end sends and receives
	// Seeds fit in the buffers: written inline, before the readers start.
	for _, c := range []*conn{ca, cb} {
		for i := range seeds {
			require.NoError(t, c.enqueueLone(frame(size, uint32(i), true)))
		}
		writers, _ := writeCounts(c)
		require.Zero(t, writers, "the seeds did not fit in the socket buffers")
	}
	var wg sync.WaitGroup
	results := make(chan int, 2)
	for _, c := range []*conn{ca, cb} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, sent := 0, seeds
			for got < total {
				msg, err := c.tc.ReadMessage()
				if err != nil || !bytes.Equal(msg, frame(size, uint32(got), true)) {
					break
				}
				got++
				for range 2 {
					if got > answered {
						break
					}
					if c.enqueueLone(frame(size, uint32(sent), true)) != nil {
						break
					}
					sent++
				}
			}
			results <- got
		}()
	}
	timeout := time.After(20 * time.Second)
	for range 2 {
		select {
		case got := <-results:
			assert.Equal(t, total, got, "messages received intact and in order")
		case <-timeout:
			ca.close("deadlocked")
			cb.close("deadlocked")
			wg.Wait()
			t.Fatal("deadlock: neither side finished reading")
		}
	}
	wg.Wait()
	for _, c := range []*conn{ca, cb} {
		writers, inline := writeCounts(c)
		t.Logf("%d written inline, %d writers", inline, writers)
		c.close("test over")
		c.out.Close(true)
	}
}

// readInOrder reads len(sent) messages from far: each must be the one
// sent at its place.
func readInOrder(t *testing.T, far transport.Conn, sent [][]byte) {
	t.Helper()
	for i, want := range sent {
		got, err := far.ReadMessage()
		require.NoError(t, err, "message %d", i)
		require.True(t, bytes.Equal(want, got), "message %d differs", i)
	}
}

// waitWriterIdle waits until no goroutine is writing on c.
func waitWriterIdle(t *testing.T, c *conn) {
	t.Helper()
	require.Eventually(t, func() bool {
		c.out.Mu.Lock()
		defer c.out.Mu.Unlock()
		return !c.out.Writing()
	}, 5*time.Second, time.Millisecond)
}

// enqueueRequest queues msg as conn.submit does.
func enqueueRequest(c *conn, msg []byte, alone bool) (inline bool, err error) {
	inline, ok := c.out.Post(msg, alone, false, nil)
	if !ok {
		return false, ErrConnectionLost
	}
	return inline, nil
}
