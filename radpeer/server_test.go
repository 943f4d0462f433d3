package radpeer

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/internal/testhelp"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	lradius "layeh.com/radius"
)

// rawClient is one client connection to a Server, writing and reading
// packets by hand.
type rawClient struct {
	t    *testing.T
	conn net.Conn // the client's end
	tc   transport.Conn
}

// connect hands the server end of a new pipe to ln and returns the client end.
func connect(t *testing.T, ln *pipeListener) *rawClient {
	t.Helper()
	a, b := net.Pipe()
	ln.ch <- framed(b)
	return &rawClient{t: t, conn: a, tc: framed(a)}
}

func (c *rawClient) send(r *radius.Request, id byte) {
	c.t.Helper()
	b, _, err := radius.EncodeRequest(r, id, testSecret)
	require.NoError(c.t, err)
	require.NoError(c.t, c.tc.WriteMessages(b))
}

// closedByServer reports whether the server closed the connection: a
// read returns EOF (or the pipe's closed error) rather than blocking.
func (c *rawClient) closedByServer() bool {
	c.conn.SetReadDeadline(time.Now().Add(time.Millisecond))
	_, err := c.conn.Read(make([]byte, 1))
	c.conn.SetReadDeadline(time.Time{})
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe)
}

func startServer(t *testing.T, cfg ServerConfig) (*Server, *pipeListener) {
	t.Helper()
	ln := newPipeListener()
	if cfg.Secret == nil {
		cfg.Secret = testSecret
	}
	s, err := NewServer(ln, SchemeTCP, cfg)
	require.NoError(t, err)
	go s.Serve()
	return s, ln
}

// emfileListener fails its first accepts with EMFILE, as when the
// process is out of descriptors, then accepts from its pipeListener.
type emfileListener struct {
	*pipeListener
	fails atomic.Int32
}

func (l *emfileListener) Accept() (transport.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	return l.pipeListener.Accept()
}

// A listener that runs out of descriptors goes on accepting once it has
// some again: the old Serve returned on the first EMFILE and the
// listening socket stayed open with nobody accepting.
func TestServerAcceptsAfterEMFILE(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := &emfileListener{pipeListener: newPipeListener()}
		ln.fails.Store(8)
		s, err := NewServer(ln, SchemeTCP, ServerConfig{Secret: testSecret, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		served := make(chan error, 1)
		go func() { served <- s.Serve() }()
		p := dialTo(t, ln.pipeListener)
		time.Sleep(3 * time.Second) // the back-off: 5 ms doubling, 1.3 s in all
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err = p.Exchange(ctx, accessReq("alice"))
		require.NoError(t, err, "answered after 8 failed accepts")
		mustClose(t, p, s)
		require.NoError(t, <-served)
	})
}

func dialTo(t *testing.T, ln *pipeListener) *Peer {
	t.Helper()
	cfg := testConfig(30 * time.Second)
	cfg.Dialer = ln.dialer()
	p, err := Dial("radius+tcp://s:1812", cfg)
	require.NoError(t, err)
	synctest.Wait()
	return p
}

// Connections that sent no request passing verification are bounded in
// all and per address (a new one over the bound pushes out the oldest),
// and closed after OpeningTimeout; an admitted one
// is closed after IdleTimeout without a request, and so is one that
// dribbles a packet too slowly. The old server kept them all forever.
func TestServerOpeningLimitsAndTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, ln := startServer(t, ServerConfig{MaxOpening: 3, MaxOpeningPerAddr: -1,
			OpeningTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second, Logger: slog.New(slog.DiscardHandler)})
		silent := []*rawClient{connect(t, ln), connect(t, ln), connect(t, ln)}
		synctest.Wait()
		over := connect(t, ln)
		synctest.Wait()
		assert.True(t, silent[0].closedByServer(), "a fourth connection without a valid request pushes out the oldest")
		assert.False(t, over.closedByServer(), "and takes its place")
		assert.Equal(t, uint64(0), s.Stats().Refused)
		assert.Equal(t, uint64(1), s.Stats().Evicted)
		assert.Equal(t, 3, s.Stats().Opening)

		// One of the three sends a valid request: admitted, it frees its
		// place, and a new one is taken.
		good := silent[1]
		go io.Copy(io.Discard, good.conn)
		good.send(accessReq("alice"), 1)
		synctest.Wait()
		assert.Equal(t, 2, s.Stats().Opening, "admitted by its first verified request")
		slow := connect(t, ln)
		synctest.Wait()
		assert.False(t, slow.closedByServer(), "room for one more")
		// slow dribbles the first bytes of a packet and stops.
		_, err := slow.conn.Write([]byte{byte(lradius.CodeAccessRequest), 1, 0})
		require.NoError(t, err)

		time.Sleep(10*time.Second + time.Millisecond)
		synctest.Wait()
		for i, c := range []*rawClient{silent[2], over, slow} {
			assert.True(t, c.closedByServer(), "connection %d without a valid request closed after OpeningTimeout", i)
		}
		assert.False(t, good.closedByServer(), "the admitted one stays")
		assert.Equal(t, 0, s.Stats().Opening)

		// good sends half a packet and no more: the idle timeout, from its
		// last whole request, closes it.
		good.conn.SetWriteDeadline(time.Time{}) // WriteMessages' deadline has passed
		_, err = good.conn.Write([]byte{byte(lradius.CodeAccessRequest), 2, 0})
		require.NoError(t, err)
		time.Sleep(20 * time.Second)
		synctest.Wait()
		assert.True(t, good.closedByServer(), "no whole request for IdleTimeout: closed")
		assert.Equal(t, uint64(4), s.Stats().TimedOut)
		mustClose(t, s)
	})
}

// An Access-Request without Message-Authenticator is answered (the
// policy lets a client that never signed send one) but admits no
// connection: anyone can make one without the secret, so a connection
// that sends only those stays within the opening limits (MaxOpening),
// and cannot take the places kept for clients that hold the secret: a new
// connection over the bound pushes out the oldest of them. It is not cut
// while it sends, as a NAS that never signs must not be, but closed once
// idle. A signed request (an Accounting-Request) admits it.
func TestServerUnsignedAccessRequestAdmitsNoConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, ln := startServer(t, ServerConfig{MaxOpening: 2, MaxOpeningPerAddr: -1,
			OpeningTimeout: 10 * time.Second, IdleTimeout: 20 * time.Second, Logger: slog.New(slog.DiscardHandler)})
		var unsigned []*rawClient
		for i := range 2 {
			c := connect(t, ln)
			go io.Copy(io.Discard, c.conn)
			require.NoError(t, c.tc.WriteMessages(unsignedRequest(t, lradius.CodeAccessRequest, byte(i+1),
				&lradius.AVP{Type: radius.AttrUserName, Attribute: []byte("mallory")})))
			unsigned = append(unsigned, c)
		}
		synctest.Wait()
		assert.Equal(t, uint64(2), s.Stats().Answered, "unsigned Access-Requests are answered")
		assert.Equal(t, 2, s.Stats().Opening, "but admit no connection")
		over := connect(t, ln)
		go io.Copy(io.Discard, over.conn)
		synctest.Wait()
		assert.True(t, unsigned[0].closedByServer(), "a third connection pushes out the oldest unadmitted one")
		require.NoError(t, over.tc.WriteMessages(unsignedRequest(t, lradius.CodeAccessRequest, 3,
			&lradius.AVP{Type: radius.AttrUserName, Attribute: []byte("nas")})))
		synctest.Wait()
		unsigned[0] = over

		// A signed request admits its connection and frees its place.
		acct := unsigned[1]
		acct.send(acctReq("s1"), 9)
		synctest.Wait()
		assert.Equal(t, 1, s.Stats().Opening, "admitted by its Accounting-Request")

		// A connection that sends only unsigned requests is not cut
		// while it sends (a NAS that never signs): it is read until idle,
		// in its opening place.
		for i := range 3 {
			time.Sleep(8 * time.Second)
			require.NoError(t, unsigned[0].tc.WriteMessages(unsignedRequest(t, lradius.CodeAccessRequest, byte(10+i),
				&lradius.AVP{Type: radius.AttrUserName, Attribute: []byte("nas")})))
		}
		synctest.Wait()
		assert.False(t, unsigned[0].closedByServer(), "still sending, 24 s after it opened: kept")
		assert.Equal(t, uint64(7), s.Stats().Answered, "and answered")
		assert.Equal(t, 1, s.Stats().Opening, "still in its opening place")
		time.Sleep(30 * time.Second)
		synctest.Wait()
		assert.True(t, unsigned[0].closedByServer(), "idle for IdleTimeout: closed")
		mustClose(t, s)
	})
}

// A client that pipelines requests and never reads its answers stops
// being read at MaxUnanswered: the server's memory for it is bounded. The
// old server read and answered without bound, its answers piling up
// behind the write deadline.
func TestServerStopsReadingAtMaxUnanswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 8
		s, ln := startServer(t, ServerConfig{MaxUnanswered: limit, Logger: slog.New(slog.DiscardHandler)})
		c := connect(t, ln)
		sent := make(chan int)
		go func() {
			n := 0
			for i := 0; i < 200; i++ {
				b, _, _ := radius.EncodeRequest(accessReq("alice"), byte(i), testSecret)
				if c.tc.WriteMessages(b) != nil {
					break
				}
				n++
			}
			sent <- n
		}()
		synctest.Wait()
		st := s.Stats()
		assert.LessOrEqual(t, st.Received, uint64(limit+1), "read at most MaxUnanswered (and the one it paused on)")
		assert.GreaterOrEqual(t, st.Received, uint64(limit))
		assert.Equal(t, uint64(1), st.Paused)
		// Reading the answers lets it go on.
		go io.Copy(io.Discard, c.conn)
		n := <-sent
		synctest.Wait()
		assert.Equal(t, 200, n)
		assert.Equal(t, uint64(200), s.Stats().Answered)
		c.conn.Close()
		mustClose(t, s)
	})
}

// Accounting has a handler budget of its own: handlers stuck on a slow
// store hold only accounting, and Access-Requests are still answered. The
// old server had one budget per connection and its reader waited for it.
func TestServerAccountingStuckAuthenticationGoesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stuck := make(chan struct{})
		var acctIn atomic.Int32
		h := func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
			if req.Code == lradius.CodeAccountingRequest {
				acctIn.Add(1)
				select {
				case <-stuck:
				case <-ctx.Done():
					return 0, nil
				}
			}
			return AcceptAll(ctx, req, raw)
		}
		s, ln := startServer(t, ServerConfig{Handler: h, MaxInFlight: 2, MaxQueued: 2, Logger: slog.New(slog.DiscardHandler)})
		p := dialTo(t, ln)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		for i := range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.Exchange(ctx, acctReq(string(rune('a'+i))))
			}()
		}
		synctest.Wait()
		assert.Equal(t, int32(2), acctIn.Load(), "two accounting handlers run, stuck")
		st := s.Stats()
		assert.Equal(t, uint64(1), st.Overload, "2 run, 2 wait, the fifth is dropped")
		for i := range 10 {
			r, err := p.Exchange(ctx, accessReq("alice"))
			require.NoError(t, err, "Access-Request %d answered while accounting is stuck", i)
			assert.Equal(t, lradius.CodeAccessAccept, r.Packet.Code)
		}
		close(stuck)
		cancel()
		wg.Wait()
		mustClose(t, p, s)
	})
}

// A flood of connections failing their authenticator writes a bounded
// number of log lines; the old server wrote one WARN line each.
func TestServerBadAuthLogsRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf testhelp.SyncBuffer
		lg := slog.New(slog.NewTextHandler(&buf, nil))
		s, ln := startServer(t, ServerConfig{Logger: lg})
		before := serve.Count(serve.KindBadAuth)
		for i := range 500 {
			c := connect(t, ln)
			b, _, _ := radius.EncodeRequest(accessReq("mallory"), byte(i), []byte("wrong secret"))
			c.tc.WriteMessages(b)
			synctest.Wait()
			c.conn.Close()
		}
		synctest.Wait()
		assert.Equal(t, uint64(500), s.Stats().BadAuth)
		var bySource uint64
		for _, n := range s.Stats().BadAuthBySource {
			bySource += n
		}
		assert.Equal(t, uint64(500), bySource, "counted by source too: %v", s.Stats().BadAuthBySource)
		out := buf.String()
		// The limiter is the process's: an earlier test (or -count=2) may
		// have spent this window, so the lines may be fewer, never more.
		n := strings.Count(out, "failed verification")
		assert.LessOrEqual(t, n, 20, "rate-limited")
		assert.Equal(t, strings.Count(out, "shared secret mismatch?"), n, "each line names the likely cause")
		assert.Equal(t, uint64(500), serve.Count(serve.KindBadAuth)-before, "each one counted, logged or not")
		mustClose(t, s)
	})
}

// The Handler learns who sent the request.
func TestServerHandlerSeesSender(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		got := make(chan Sender, 1)
		h := func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
			s, ok := SenderOf(ctx)
			if ok {
				got <- s
			}
			return AcceptAll(ctx, req, raw)
		}
		s, ln := startServer(t, ServerConfig{Handler: h})
		p := dialTo(t, ln)
		_, err := p.Exchange(context.Background(), accessReq("alice"))
		require.NoError(t, err)
		select {
		case <-got:
		default:
			t.Fatal("no Sender on the Handler's context")
		}
		mustClose(t, p, s)
	})
}

// A negative IdleTimeout means never: an admitted connection outlives the
// opening timeout (the opening deadline once closed it at 1 min).
func TestServerIdleTimeoutNever(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, ln := startServer(t, ServerConfig{OpeningTimeout: 10 * time.Second, IdleTimeout: -1, Logger: slog.New(slog.DiscardHandler)})
		c := connect(t, ln)
		go io.Copy(io.Discard, c.conn)
		c.send(accessReq("alice"), 1)
		time.Sleep(time.Hour)
		synctest.Wait()
		assert.False(t, c.closedByServer(), "admitted, never idle-closed")
		assert.Equal(t, uint64(0), s.Stats().TimedOut)
		c.conn.Close()
		mustClose(t, s)
	})
}

// A client waiting for a slow handler is not idle: its answer comes after
// IdleTimeout and still reaches it; then the idle timeout runs from the
// answer.
func TestServerIdleTimeoutWaitsForOwedAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		h := func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
			select {
			case <-release:
			case <-ctx.Done():
				return 0, nil
			}
			return AcceptAll(ctx, req, raw)
		}
		s, ln := startServer(t, ServerConfig{Handler: h, IdleTimeout: 30 * time.Second, Logger: slog.New(slog.DiscardHandler)})
		c := connect(t, ln)
		answers := make(chan []byte, 1)
		go func() {
			b, err := c.tc.ReadMessage()
			if err == nil {
				answers <- b
			}
		}()
		c.send(accessReq("alice"), 1)
		time.Sleep(45 * time.Second)
		synctest.Wait()
		assert.Equal(t, uint64(0), s.Stats().TimedOut, "owed an answer: not idle")
		close(release)
		synctest.Wait()
		select {
		case b := <-answers:
			assert.Equal(t, lradius.CodeAccessAccept, radius.Code(b))
		default:
			t.Fatal("the slow answer was lost")
		}
		time.Sleep(30*time.Second + time.Millisecond)
		synctest.Wait()
		assert.True(t, c.closedByServer(), "idle from the answer on: closed")
		assert.Equal(t, uint64(1), s.Stats().TimedOut)
		mustClose(t, s)
	})
}

// A setting out of range is refused, not taken as the least safe one.
func TestServerConfigRefused(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	defer pc.Close()
	for _, cfg := range []ServerConfig{
		{Secret: testSecret, RequireMessageAuthenticator: RequireMANever + 1},
		{Secret: testSecret, LimitProxyState: LimitProxyStateNever + 1},
		{Secret: testSecret, DupBytes: -1},
	} {
		_, err := NewServer(newPipeListener(), SchemeTCP, cfg)
		assert.ErrorIs(t, err, ErrConfig, "stream %+v", cfg)
		_, err = NewUDPServer(pc, cfg)
		assert.ErrorIs(t, err, ErrConfig, "UDP %+v", cfg)
	}
}

// Accounting stuck on a slow store holds at most half of a connection's
// unanswered bound: the records past it wait in their lane (dropped past
// its bound) without counting against the connection, and the reader
// goes on reading the Access-Requests behind them. Before, the stuck
// records filled the bound and the reader stopped for every request.
func TestServerStuckAccountingLeavesRoomOnItsConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stuck := make(chan struct{})
		h := releasedHandler(stuck)
		const limit = 8
		s, ln := startServer(t, ServerConfig{Handler: h, MaxUnanswered: limit, MaxInFlight: 4, MaxQueued: 12, Logger: slog.New(slog.DiscardHandler)})
		c := connect(t, ln)
		answers := make(chan lradius.Code, 100)
		go func() {
			for {
				b, err := c.tc.ReadMessage()
				if err != nil {
					return
				}
				answers <- radius.Code(b)
			}
		}()
		for i := range 20 {
			c.send(acctReq(string(rune('a'+i))), byte(i))
		}
		for i := range 10 {
			c.send(accessReq("alice"), byte(100+i))
		}
		synctest.Wait()
		assert.Len(t, answers, 10, "every Access-Request answered while accounting is stuck")
		assert.Equal(t, uint64(20-4-12), s.Stats().Overload, "records past their lane (4 running, 12 waiting) dropped")
		close(stuck)
		synctest.Wait()
		assert.Len(t, answers, 10+16, "the held records answered once released")
		c.conn.Close()
		mustClose(t, s)
	})
}

// MaxConnections bounds the connections open, admitted ones included:
// past it a new connection is closed at once and counted, and one that
// ends makes room.
func TestServerMaxConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, ln := startServer(t, ServerConfig{MaxConnections: 2, Logger: slog.New(slog.DiscardHandler)})
		var admitted []*rawClient
		for i := range 2 {
			c := connect(t, ln)
			go io.Copy(io.Discard, c.conn)
			c.send(accessReq("alice"), byte(i))
			admitted = append(admitted, c)
		}
		synctest.Wait()
		assert.Equal(t, 0, s.Stats().Opening, "both admitted")
		over := connect(t, ln)
		synctest.Wait()
		assert.True(t, over.closedByServer(), "a third connection is closed at once")
		assert.Equal(t, uint64(1), s.Stats().Refused)
		admitted[0].conn.Close()
		synctest.Wait()
		again := connect(t, ln)
		synctest.Wait()
		assert.False(t, again.closedByServer(), "room once one ended")
		assert.Equal(t, 2, s.Stats().Open)
		again.conn.Close()
		admitted[1].conn.Close()
		mustClose(t, s)
	})
}

// MaxConnectionsPerAddr bounds the connections open from one address.
func TestServerMaxConnectionsPerAddr(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, ln := startServer(t, ServerConfig{MaxConnectionsPerAddr: 1, Logger: slog.New(slog.DiscardHandler)})
		first := connect(t, ln) // every pipe connection comes from one address
		go io.Copy(io.Discard, first.conn)
		first.send(accessReq("alice"), 1)
		synctest.Wait()
		second := connect(t, ln)
		synctest.Wait()
		assert.True(t, second.closedByServer(), "a second connection from the address is closed at once")
		assert.Equal(t, uint64(1), s.Stats().Refused)
		first.conn.Close()
		mustClose(t, s)
	})
}

// Requests the Message-Authenticator policy refuses (here Status-Server
// without one, which anyone can send, on a connection never admitted)
// are each counted, but logged and published as events at the log's
// bounded rate: before, each one was an event, so one connection could
// flood every subscriber and an --events file.
func TestServerPolicyRefusalsRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bus := peer.NewBus()
		var events atomic.Int64
		defer bus.Subscribe(func(_ context.Context, e peer.Event) {
			if e.Kind == peer.EventError {
				events.Add(1)
			}
		})()
		s, ln := startServer(t, ServerConfig{Events: bus, Logger: slog.New(slog.DiscardHandler)})
		c := connect(t, ln)
		for i := range 500 {
			require.NoError(t, c.tc.WriteMessages(unsignedRequest(t, lradius.CodeStatusServer, byte(i))))
		}
		synctest.Wait()
		assert.Equal(t, uint64(500), s.Stats().Dropped, "every refusal counted")
		assert.LessOrEqual(t, events.Load(), int64(20), "events at the log's rate (20 a window)")
		c.conn.Close()
		mustClose(t, s)
	})
}
