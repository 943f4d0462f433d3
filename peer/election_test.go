package peer

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// A second CER from an identity that already has an open connection on
// the server is refused with DIAMETER_UNABLE_TO_COMPLY, whatever the case
// of its Origin-Host; the first connection stays in service.
func TestSecondConnectionFromOpenIdentityRefused(t *testing.T) {
	bus := NewBus()
	rec, cancel := record(bus)
	defer cancel()
	s := startServer(t, "tcp://127.0.0.1:0", func(c *Config) { c.Events = bus })
	p := dialOkay(t, "tcp://"+s.Addr().String(), nil)
	// The server's side is up once it has sent the CEA: wait for it.
	require.Eventually(t, func() bool {
		ps := s.Peers()
		return len(ps) == 1 && ps[0].State() == watchdog.Okay
	}, 5*time.Second, time.Millisecond)
	for _, host := range []string{"client.example.net", "CLIENT.Example.NET"} {
		tc, err := transport.Dial(bounded(t), "tcp://"+s.Addr().String(), transport.Options{})
		require.NoError(t, err)
		cfg, err := clientConfig(host).validate()
		require.NoError(t, err)
		require.NoError(t, tc.WriteMessages(withIDs(cfg.newCER(tc.LocalAddr()), wire.NewHopByHopGenRandom())))
		cea, err := tc.ReadMessage()
		require.NoError(t, err)
		rc, _ := message.ResultCodeOf(cea)
		assert.Equal(t, uint32(message.UnableToComply), rc, host)
		_, err = tc.ReadMessage()
		assert.Error(t, err, "refused connection closed")
		tc.Close()
	}
	hasReason(t, rec, "already has an open connection")
	ans, err := p.Request(bounded(t), acr())
	require.NoError(t, err)
	rc, _ := message.ResultCodeOf(ans)
	assert.Equal(t, uint32(message.Success), rc, "the first connection is kept")
}

// slowCER delays the first read of an accepted connection, so that both
// sides' CERs are out before either is answered: the election then runs.
type slowCER struct {
	transport.Conn
	once sync.Once
}

func (s *slowCER) ReadMessage() ([]byte, error) {
	s.once.Do(func() { time.Sleep(300 * time.Millisecond) })
	return s.Conn.ReadMessage()
}

type node struct {
	srv    *Server
	cli    *Peer
	rec    *recorder
	cancel func()
}

// Two nodes dial each other at once (RFC 6733 5.6.4): b.example.net wins
// (its Origin-Host is higher), closes the connection it initiated and keeps
// a's; a answers b's CER with DIAMETER_ELECTION_LOST. Both end with one
// connection, in service both ways.
func TestElectionOverTCP(t *testing.T) {
	mk := func(host string) *node {
		n := &node{}
		bus := NewBus()
		n.rec, n.cancel = record(bus)
		cfg := clientConfig(host)
		cfg.Handler, cfg.Events, cfg.Table = acctHandler, bus, NewTable()
		s, err := Listen("tcp://127.0.0.1:0", cfg)
		require.NoError(t, err)
		s.Wrap = func(c transport.Conn) transport.Conn { return &slowCER{Conn: c} }
		n.srv = s
		served := make(chan error, 1)
		go func() { served <- s.Serve() }()
		t.Cleanup(func() {
			n.cancel()
			s.Close(context.Background())
			require.NoError(t, <-served)
		})
		return n
	}
	a, b := mk("a.example.net"), mk("B.example.net")
	dial := func(n, to *node, remote string) {
		cfg := n.srv.cfg
		cfg.RemoteHost = remote
		p, err := Dial("tcp://"+to.srv.Addr().String(), cfg)
		require.NoError(t, err)
		n.cli = p
		t.Cleanup(func() { p.Close(context.Background()) })
	}
	dial(a, b, "b.example.net")
	dial(b, a, "A.example.net")
	defer func() {
		if t.Failed() {
			for _, n := range []*node{a, b} {
				n.rec.mu.Lock()
				for _, e := range n.rec.events {
					t.Logf("%s: %s %s %s->%s %s", n.srv.cfg.OriginHost, e.Peer, e.Kind, e.From, e.To, e.Reason)
				}
				n.rec.mu.Unlock()
			}
		}
	}()
	require.NoError(t, a.cli.WaitState(bounded(t), watchdog.Okay))
	require.NoError(t, b.cli.WaitState(bounded(t), watchdog.Okay))
	require.Eventually(t, func() bool { return len(a.srv.Peers()) == 0 && len(b.srv.Peers()) == 0 }, 5*time.Second, 10*time.Millisecond,
		"no server-side peer is left: the kept connection belongs to the client peers")
	// The events are delivered on each peer's notifier, after the states
	// the waits above saw: wait for them too.
	waitReason(t, b.rec, "election won against a.example.net")
	// a refuses b's CER: ELECTION_LOST if it came while a waited for
	// its CEA, else because a's connection is open by then.
	require.Eventually(t, func() bool {
		return hasEvent(a.rec, "election lost to B.example.net") || hasEvent(a.rec, "B.example.net already has an open connection")
	}, 5*time.Second, 10*time.Millisecond, "a refused b's CER")
	assert.Equal(t, a.cli.cur.Load().tc.LocalAddr().String(), b.cli.cur.Load().tc.RemoteAddr().String(), "one connection, a's")
	for _, n := range []*node{a, b} {
		ans, err := n.cli.Request(bounded(t), acrFrom(n.cli.cfg.OriginHost)) // the request's Origin-Host must be its connection's peer
		require.NoError(t, err)
		rc, _ := message.ResultCodeOf(ans)
		assert.Equal(t, uint32(message.Success), rc)
		assert.Zero(t, n.cli.Stats().OpenFailed, "the election is not an open failure")
	}
}

// A client that disconnected with a DPR may connect again at once: its
// identity is released when the server receives the DPR, not when the
// old connection finally closes, which waits for the answers it owes
// (here a Handler still running) and for the DPA to be written.
func TestReconnectAfterDPRAccepted(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	var once sync.Once
	defer once.Do(func() { close(release) })
	s := startServer(t, "tcp://127.0.0.1:0", func(c *Config) {
		c.Handler = func(ctx context.Context, p *Peer, req []byte) []byte {
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return message.ErrorAnswer(req, p.LocalIdentity(), message.Success, "").Bytes()
		}
	})
	cfg, err := clientConfig("client.example.net").validate()
	require.NoError(t, err)
	ids := wire.NewHopByHopGenRandom()
	open := func() (transport.Conn, uint32) {
		tc, err := transport.Dial(bounded(t), "tcp://"+s.Addr().String(), transport.Options{})
		require.NoError(t, err)
		require.NoError(t, tc.WriteMessages(withIDs(cfg.newCER(tc.LocalAddr()), ids)))
		cea, err := tc.ReadMessage()
		require.NoError(t, err)
		rc, _ := message.ResultCodeOf(cea)
		return tc, rc
	}
	a, rc := open()
	defer a.Close()
	require.Equal(t, uint32(message.Success), rc)
	require.NoError(t, a.WriteMessages(withIDs(acr(), ids)))
	<-entered
	require.NoError(t, a.WriteMessages(withIDs(cfg.newDPR(message.DisconnectRebooting), ids)))
	require.Eventually(t, func() bool {
		ps := s.Peers()
		if len(ps) != 1 {
			return false
		}
		c := ps[0].cur.Load()
		return c != nil && strings.HasPrefix(c.note(), "DPR received")
	}, 5*time.Second, time.Millisecond, "the server stepped the DPR")

	b, rc := open()
	defer b.Close()
	assert.Equal(t, uint32(message.Success), rc, "the reconnection is accepted while the old connection still owes an answer")

	once.Do(func() { close(release) })
	for _, want := range []uint32{message.CmdAccounting, wire.CmdDisconnectPeer} {
		m, err := a.ReadMessage()
		require.NoError(t, err)
		assert.Equal(t, want, wire.CommandCode(m), "the old connection still gets its answer, then the DPA")
	}
}
