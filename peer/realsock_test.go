package peer

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/internal/testhelp"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// Real sockets on loopback, outside synctest bubbles, every wait bounded.

func acctHandler(ctx context.Context, p *Peer, req []byte) []byte {
	return message.NewAnswer(req).Uint32(message.ResultCode, 0, true, message.Success).
		String(message.OriginHost, 0, true, "server.example.net").
		String(message.OriginRealm, 0, true, "example.net").Bytes()
}

func startServer(t *testing.T, url string, mutate func(*Config)) *Server {
	t.Helper()
	cfg := clientConfig("server.example.net")
	cfg.Handler = acctHandler
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := Listen(url, cfg)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Close(ctx)
		require.NoError(t, <-done)
	})
	return s
}

func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func dialOkay(t *testing.T, url string, mutate func(*Config)) *Peer {
	t.Helper()
	cfg := clientConfig("client.example.net")
	if mutate != nil {
		mutate(&cfg)
	}
	p, err := Dial(url, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close(context.Background()) })
	require.NoError(t, p.WaitState(bounded(t), watchdog.Okay))
	return p
}

func TestTCPRequestAnswerAndGracefulClose(t *testing.T) {
	s := startServer(t, "tcp://127.0.0.1:0", nil)
	p := dialOkay(t, "tcp://"+s.Addr().String(), nil)
	assert.Equal(t, "server.example.net", p.Name(), "named by the CEA's Origin-Host")

	for i := range 100 {
		ans, err := p.Request(bounded(t), acr())
		require.NoError(t, err, "request %d", i)
		rc, ok := message.ResultCodeOf(ans)
		require.True(t, ok)
		assert.Equal(t, uint32(message.Success), rc)
		assert.Zero(t, wire.Flags(ans)&wire.FlagRetransmit, "answers never carry T")
	}
	st := p.Stats()
	assert.Equal(t, uint64(100), st.Sent)
	assert.Equal(t, uint64(100), st.Answered)

	require.Eventually(t, func() bool { return len(s.Peers()) == 1 }, 5*time.Second, 10*time.Millisecond)
	sp := s.Peers()[0]
	assert.Equal(t, "client.example.net", sp.Name())
	// The counter follows the enqueue, which may trail the client's read.
	require.Eventually(t, func() bool { return sp.Stats().AnswersSent == 100 }, 5*time.Second, time.Millisecond)

	// DPR/DPA: the client closes; the server's peer ends too.
	require.NoError(t, p.Close(bounded(t)))
	select {
	case <-sp.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("server peer did not end after DPR")
	}
}

// Pipelining: many callers on one connection (T3).
func TestTCPConcurrentCallers(t *testing.T) {
	s := startServer(t, "tcp://127.0.0.1:0", nil)
	p := dialOkay(t, "tcp://"+s.Addr().String(), nil)
	const callers, each = 64, 50
	errs := make(chan error, callers)
	for range callers {
		go func() {
			for range each {
				if _, err := p.Request(context.Background(), acr()); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range callers {
		require.NoError(t, <-errs)
	}
	assert.Equal(t, uint64(callers*each), p.Stats().Answered)
	assert.Zero(t, p.Stats().Unmatched)
}

func TestCERRejections(t *testing.T) {
	t.Run("unknown peer 3010", func(t *testing.T) {
		s := startServer(t, "tcp://127.0.0.1:0", func(c *Config) { c.AllowHosts = []string{"*.other.net"} })
		checkRejected(t, s, nil, message.UnknownPeer)
	})
	t.Run("no common application 5010", func(t *testing.T) {
		s := startServer(t, "tcp://127.0.0.1:0", func(c *Config) { c.AcctApps = []uint32{3} })
		checkRejected(t, s, func(c *Config) { c.AuthApps = []uint32{4} }, message.NoCommonApplication)
	})
}

func checkRejected(t *testing.T, s *Server, mutate func(*Config), rc uint32) {
	cfg := clientConfig("client.example.net")
	if mutate != nil {
		mutate(&cfg)
	}
	cfg.Events = NewBus()
	rec, cancel := record(cfg.Events) // before Dial: the refusal can come at once
	defer cancel()
	p, err := Dial("tcp://"+s.Addr().String(), cfg)
	require.NoError(t, err)
	defer p.Close(context.Background())
	// Events reach subscribers from the peer's notifier, a moment after
	// the step that counted the failure.
	require.Eventually(t, func() bool { return p.Stats().OpenFailed > 0 && len(rec.ofKind(EventOpenFailed)) > 0 }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, watchdog.Initial, p.State())
	evs := rec.ofKind(EventOpenFailed)
	require.NotEmpty(t, evs)
	assert.Contains(t, evs[0].Reason, resultName(rc))
	_, err = p.Request(context.Background(), acr())
	assert.ErrorIs(t, err, ErrNotInService)
}

// The exchange itself, to check the typed error a CEA failure produces.
func TestCEAFailureIsCapabilitiesError(t *testing.T) {
	s := startServer(t, "tcp://127.0.0.1:0", func(c *Config) { c.AllowHosts = []string{"nobody.example.org"} })
	tc, err := transport.Dial(bounded(t), "tcp://"+s.Addr().String(), transport.Options{})
	require.NoError(t, err)
	defer tc.Close()
	p, err := newPeer(clientConfig("client.example.net"), RoleClient, "x", "x")
	require.NoError(t, err)
	_, err = p.exchangeClient(tc)
	var ce *CapabilitiesError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, uint32(message.UnknownPeer), ce.ResultCode)
	assert.Contains(t, err.Error(), "DIAMETER_UNKNOWN_PEER")
	assert.Contains(t, err.Error(), "allow-list")
}

// A DWR from the other side is answered at once, also three back to back
// straight after the CEA, as freeDiameter does when it reopens.
func TestDWRAnsweredAtOnceAfterCEA(t *testing.T) {
	s := startServer(t, "tcp://127.0.0.1:0", nil)
	tc, err := transport.Dial(bounded(t), "tcp://"+s.Addr().String(), transport.Options{})
	require.NoError(t, err)
	defer tc.Close()
	cfg := clientConfig("raw.example.net")
	cfg, _ = cfg.validate()
	require.NoError(t, tc.WriteMessages(cfg.newCER(tc.LocalAddr())))
	cea, err := tc.ReadMessage()
	require.NoError(t, err)
	rc, _ := message.ResultCodeOf(cea)
	require.Equal(t, uint32(message.Success), rc)
	var dwrs [][]byte
	for i := range 3 {
		d := cfg.newDWR()
		wire.SetHopByHop(d, uint32(100+i))
		wire.SetEndToEnd(d, uint32(200+i))
		dwrs = append(dwrs, d)
	}
	require.NoError(t, tc.WriteMessages(dwrs...))
	for i := range 3 {
		dwa, err := tc.ReadMessage()
		require.NoError(t, err)
		assert.Equal(t, uint32(wire.CmdDeviceWatchdog), wire.CommandCode(dwa))
		assert.False(t, wire.IsRequest(dwa))
		assert.Equal(t, uint32(100+i), wire.HopByHop(dwa))
		rc, _ := message.ResultCodeOf(dwa)
		assert.Equal(t, uint32(message.Success), rc)
	}
}

// Bad bytes close only that connection, with a counted reason (T5).
func TestBadFrameClosesOnlyThatConnection(t *testing.T) {
	s := startServer(t, "tcp://127.0.0.1:0", nil)
	rec, cancel := record(s.Events())
	defer cancel()
	good := dialOkay(t, "tcp://"+s.Addr().String(), nil)

	// A raw connection completes CER/CEA, then writes a version-2 header.
	tc, err := transport.Dial(bounded(t), "tcp://"+s.Addr().String(), transport.Options{})
	require.NoError(t, err)
	defer tc.Close()
	cfg, _ := clientConfig("raw.example.net").validate()
	require.NoError(t, tc.WriteMessages(cfg.newCER(tc.LocalAddr())))
	_, err = tc.ReadMessage()
	require.NoError(t, err)
	garbage := []byte{2, 0, 0, 20, 0x80, 0, 1, 15, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1}
	require.NoError(t, tc.WriteMessages(garbage))
	_, err = tc.ReadMessage()
	assert.Error(t, err, "the server closed the bad connection")

	require.Eventually(t, func() bool {
		for _, e := range rec.ofKind(EventError) {
			if e.Peer == "raw.example.net" {
				return true
			}
		}
		return false
	}, 5*time.Second, 10*time.Millisecond)
	var reason string
	for _, e := range rec.ofKind(EventError) {
		if e.Peer == "raw.example.net" {
			reason = e.Reason
		}
	}
	assert.Contains(t, reason, "bad frame")
	assert.Contains(t, reason, "version")

	// The good connection is unaffected.
	_, err = good.Request(bounded(t), acr())
	require.NoError(t, err)
	assert.Equal(t, watchdog.Okay, good.State())
}

func TestTLSLoopback(t *testing.T) {
	dir := t.TempDir()
	cert, key := testhelp.SelfSigned(t, dir, "localhost")
	srvTLS, err := transport.ServerTLSConfig(cert, key, "")
	require.NoError(t, err)
	s := startServer(t, "tls://127.0.0.1:0", func(c *Config) { c.Transport.TLS = srvTLS })
	cliTLS, err := transport.ClientTLSConfig(cert, "", "", "localhost")
	require.NoError(t, err)
	p := dialOkay(t, "tls://"+s.Addr().String(), func(c *Config) { c.Transport.TLS = cliTLS })
	ans, err := p.Request(bounded(t), acr())
	require.NoError(t, err)
	rc, _ := message.ResultCodeOf(ans)
	assert.Equal(t, uint32(message.Success), rc)
}

func TestSCTP(t *testing.T) {
	s, err := Listen("sctp://127.0.0.1:0", clientConfig("server.example.net"))
	if errors.Is(err, transport.ErrSCTPUnsupported) {
		t.Skip(err.Error())
	}
	require.NoError(t, err)
	go s.Serve()
	defer s.Close(context.Background())
	p := dialOkay(t, "sctp://"+s.Addr().String(), nil)
	_, err = p.Request(bounded(t), acr())
	require.NoError(t, err)
}

func TestConfigErrors(t *testing.T) {
	for name, c := range map[string]Config{
		"no origin host":   {OriginRealm: "r"},
		"Tw below 6s":      {OriginHost: "h", OriginRealm: "r", Watchdog: watchdog.Config{Twinit: 5 * time.Second}},
		"idle below 5 min": {OriginHost: "h", OriginRealm: "r", IdleTimeout: 4 * time.Minute},
		"bad glob":         {OriginHost: "h", OriginRealm: "r", AllowHosts: []string{"["}},
		"vendor app":       {OriginHost: "h", OriginRealm: "r", VendorApps: []VendorApp{{VendorID: 1}}},
	} {
		_, err := Dial("tcp://127.0.0.1:1", c)
		assert.ErrorIs(t, err, ErrConfig, name)
	}
	_, err := Dial("udp://127.0.0.1:1", clientConfig("h"))
	assert.ErrorIs(t, err, ErrConfig)
}

// RFC 6733 3: every request, CER, DWR and DPR included, carries a unique
// End-to-End id and a Hop-by-Hop id (found by the freeDiameter interop
// test: ours were zero).
func TestBaseRequestsCarryIDs(t *testing.T) {
	ln, err := transport.Listen("tcp://127.0.0.1:0", transport.Options{})
	require.NoError(t, err)
	defer ln.Close()
	got := make(chan []byte, 8)
	go func() {
		tc, err := ln.Accept()
		if err != nil {
			return
		}
		defer tc.Close()
		cfg, _ := clientConfig("raw.example.net").validate()
		for {
			m, err := tc.ReadMessage()
			if err != nil {
				close(got)
				return
			}
			got <- m
			if wire.CommandCode(m) == wire.CmdCapabilitiesExchange {
				tc.WriteMessages(cfg.newCEA(m, nil, message.Success, "", nil))
			} else if wire.CommandCode(m) == wire.CmdDisconnectPeer {
				tc.WriteMessages(cfg.newDPA(m))
			}
		}
	}()
	cfg := clientConfig("client.example.net")
	cfg.Watchdog.Twinit = 6 * time.Second
	cfg.Watchdog.Rand = fixedLow{} // Tw = 4 s
	p, err := Dial("tcp://"+ln.Addr().String(), cfg)
	require.NoError(t, err)
	require.NoError(t, p.WaitState(bounded(t), watchdog.Okay))
	require.Eventually(t, func() bool { return p.Stats().DWRSent > 0 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, p.Close(bounded(t)))
	e2es := map[uint32]bool{}
	var names []string
	for m := range got {
		names = append(names, message.CommandName(m))
		assert.NotZero(t, wire.EndToEnd(m), message.CommandName(m))
		assert.NotZero(t, wire.HopByHop(m), message.CommandName(m))
		assert.False(t, e2es[wire.EndToEnd(m)], "End-to-End id reused")
		e2es[wire.EndToEnd(m)] = true
	}
	assert.Subset(t, names, []string{"CER", "DWR", "DPR"})
}

// fixedLow draws the smallest jitter: Tw = Twinit - 2 s.
type fixedLow struct{}

func (fixedLow) Int64N(int64) int64 { return 0 }

// flakyListener fails its first Accept the way an exhausted descriptor
// table does, then behaves.
type flakyListener struct {
	transport.Listener
	failed bool
}

func (l *flakyListener) Accept() (transport.Conn, error) {
	if !l.failed {
		l.failed = true
		return nil, errors.New("accept: too many open files")
	}
	return l.Listener.Accept()
}

type countingConn struct {
	transport.Conn
	reads *atomic.Int32
}

func (c countingConn) ReadMessage() ([]byte, error) {
	c.reads.Add(1)
	return c.Conn.ReadMessage()
}

// NewServer over a caller's listener: a transient accept error does not
// end Serve, Wrap sees every accepted connection, and OnPeerEnd reports
// each ended peer with its final Stats before Close returns.
func TestServerWrapOnPeerEndAndAcceptRetry(t *testing.T) {
	ln, err := transport.Listen("tcp://127.0.0.1:0", transport.Options{})
	require.NoError(t, err)
	cfg := clientConfig("server.example.net")
	cfg.Handler = acctHandler
	s, err := NewServer(&flakyListener{Listener: ln}, cfg)
	require.NoError(t, err)
	var reads atomic.Int32
	s.Wrap = func(c transport.Conn) transport.Conn { return countingConn{c, &reads} }
	var mu sync.Mutex
	var ended []Stats
	s.OnPeerEnd = func(p *Peer) {
		mu.Lock()
		ended = append(ended, p.Stats())
		mu.Unlock()
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()

	p := dialOkay(t, "tcp://"+ln.Addr().String(), nil)
	_, err = p.Request(bounded(t), acr())
	require.NoError(t, err)
	require.NoError(t, p.Close(bounded(t)))
	require.NoError(t, s.Close(bounded(t)))
	require.NoError(t, <-done)

	assert.GreaterOrEqual(t, reads.Load(), int32(2), "CER and the ACR went through Wrap")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, ended, 1)
	assert.Equal(t, "client.example.net", ended[0].Peer)
	assert.Equal(t, uint64(1), ended[0].AnswersSent)
	assert.Equal(t, "DOWN", ended[0].State)
}

// A Server's Close may be called again: a later call waits for the same
// end and returns nil, not the listener's "use of closed network
// connection".
func TestServerCloseTwice(t *testing.T) {
	s, err := Listen("tcp://127.0.0.1:0", clientConfig("server.example.net"))
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, s.Close(ctx))
	require.NoError(t, s.Close(ctx), "the second Close")
	require.NoError(t, <-served)
}

// A Server's subscribers run on its peers' notifiers: Close called by one
// with the context it got sends the DPRs and returns, without waiting for
// the DPA (here one that never comes); a Close from another goroutine
// waits for the same end.
func TestServerCloseFromSubscriber(t *testing.T) {
	bus := NewBus()
	took := make(chan time.Duration, 1)
	var once sync.Once
	var srv atomic.Pointer[Server]
	defer bus.Subscribe(func(ctx context.Context, e Event) {
		if e.Kind == EventWatchdog && e.To == watchdog.Okay {
			once.Do(func() {
				start := time.Now()
				if err := srv.Load().Close(ctx); err != nil {
					t.Errorf("Close: %v", err)
				}
				took <- time.Since(start)
			})
		}
	})()
	ln, err := transport.Listen("tcp://127.0.0.1:0", transport.Options{})
	require.NoError(t, err)
	cfg := clientConfig("server.example.net")
	cfg.Handler, cfg.Events, cfg.DPATimeout = acctHandler, bus, 2*time.Second
	s, err := NewServer(ln, cfg)
	require.NoError(t, err)
	srv.Store(s)
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	tc := rawPeer(t, s.Addr().String(), "raw.example.net") // never answers the DPR
	select {
	case d := <-took:
		assert.Less(t, d, time.Second, "Close from the subscriber waited for the DPA")
	case <-time.After(10 * time.Second):
		t.Fatal("Close from the subscriber has not returned")
	}
	dpr, err := tc.ReadMessage()
	require.NoError(t, err)
	assert.Equal(t, uint32(wire.CmdDisconnectPeer), wire.CommandCode(dpr), "the DPR was sent")
	start := time.Now()
	require.NoError(t, s.Close(context.Background()))
	assert.GreaterOrEqual(t, time.Since(start), time.Second, "a Close from another goroutine waits for the DPA timeout")
	require.NoError(t, <-served)
}
