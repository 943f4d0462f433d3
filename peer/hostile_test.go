package peer

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/wire"
)

// rawPeer is a hand-driven client connection: CER sent and CEA read, then
// whatever bytes the test writes.
func rawPeer(t *testing.T, addr, host string) transport.Conn {
	t.Helper()
	tc, err := transport.Dial(bounded(t), "tcp://"+addr, transport.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { tc.Close() })
	cfg, err := clientConfig(host).validate()
	require.NoError(t, err)
	require.NoError(t, tc.WriteMessages(withIDs(cfg.newCER(tc.LocalAddr()), wire.NewHopByHopGenRandom())))
	cea, err := tc.ReadMessage()
	require.NoError(t, err)
	rc, _ := message.ResultCodeOf(cea)
	require.Equal(t, uint32(message.Success), rc)
	return tc
}

// rawAVP encodes one AVP with the length field given, data as is.
func rawAVP(code uint32, flags byte, length int, data []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, code)
	b = append(b, flags, byte(length>>16), byte(length>>8), byte(length))
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// withAVPs appends raw AVP bytes to a message and fixes its length.
func withAVPs(msg []byte, avps ...[]byte) []byte {
	for _, a := range avps {
		msg = append(msg, a...)
	}
	binary.BigEndian.PutUint32(msg[0:4], uint32(len(msg)))
	msg[0] = wire.Version
	return msg
}

func bareACR(flags uint8) []byte {
	return message.NewRequest(message.CmdAccounting, message.AppAccounting, flags).Bytes()
}

func goodAVPs(host string) [][]byte {
	return [][]byte{
		rawAVP(message.SessionID, 0x40, 8+8, []byte("s;1;2;34")),
		rawAVP(message.OriginHost, 0x40, 8+len(host), []byte(host)),
		rawAVP(message.OriginRealm, 0x40, 8+11, []byte("example.net")),
	}
}

// Requests with bad header bits or malformed AVPs are answered with the
// RFC 6733 7 error and a Failed-AVP where one applies; the Handler never
// sees them, the connection stays up and serves the next good request.
func TestMalformedRequestsAnsweredConnectionKept(t *testing.T) {
	var handled atomic.Int64
	s := startServer(t, "tcp://127.0.0.1:0", func(c *Config) {
		c.Handler = func(ctx context.Context, p *Peer, req []byte) []byte {
			handled.Add(1)
			return acctHandler(ctx, p, req)
		}
	})
	const host = "raw.example.net"
	tc := rawPeer(t, s.Addr().String(), host)
	good := goodAVPs(host)
	hdr := func(flags uint8, avps ...[]byte) []byte { return withAVPs(bareACR(flags), avps...) }
	cases := []struct {
		name   string
		msg    []byte
		rc     uint32
		failed uint32 // code inside Failed-AVP; 0: none expected
		eBit   bool
	}{
		{"E bit", hdr(wire.FlagError, good...), message.InvalidHdrBits, 0, true},
		{"length 0", hdr(0, append(good, rawAVP(message.UserName, 0x40, 0, []byte("abcd")))...), message.InvalidAVPLength, message.UserName, false},
		{"length 7", hdr(0, append(good, rawAVP(message.UserName, 0x40, 7, []byte("abcd")))...), message.InvalidAVPLength, message.UserName, false},
		{"length 0xFFFFFF", hdr(0, append(good, rawAVP(message.UserName, 0x40, 0xffffff, []byte("abcd")))...), message.InvalidAVPLength, message.UserName, false},
		{"overruns the message", hdr(0, append(good, rawAVP(message.UserName, 0x40, 40, []byte("abcd")))...), message.InvalidAVPLength, message.UserName, false},
		{"V flag, length 8", hdr(0, append(good, rawAVP(message.UserName, 0xc0, 8, []byte{0, 0, 0, 9}))...), message.InvalidAVPLength, message.UserName, false},
		{"no AVPs", hdr(0), message.MissingAVP, message.OriginHost, false},
		{"no Origin-Realm", hdr(0, good[0], good[1]), message.MissingAVP, message.OriginRealm, false},
		{"Origin-Host twice", hdr(0, append(good, good[1])...), message.AVPOccursTooManyTimes, message.OriginHost, false},
		{"Destination-Host not an identity", hdr(0, append(good, rawAVP(message.DestinationHost, 0x40, 8+5, []byte("a\x87b.c")))...), message.InvalidAVPValue, message.DestinationHost, false},
		{"unadvertised application", withAVPs(message.NewRequest(1000, 4, 0).Bytes(), good...), message.ApplicationNoSupport, 0, true},
		{"base application command", withAVPs(message.NewRequest(999, message.AppCommon, 0).Bytes(), good...), message.CommandUnsupported, 0, true},
	}
	for i, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			wire.SetHopByHop(tt.msg, uint32(1000+i))
			require.NoError(t, tc.WriteMessages(tt.msg))
			ans, err := tc.ReadMessage()
			require.NoError(t, err, "the connection stays up")
			assert.Equal(t, uint32(1000+i), wire.HopByHop(ans))
			assert.False(t, wire.IsRequest(ans))
			rc, _ := message.ResultCodeOf(ans)
			assert.Equal(t, tt.rc, rc)
			assert.Equal(t, tt.eBit, wire.Flags(ans)&wire.FlagError != 0, "E bit on protocol errors only")
			oh, _ := message.StringOf(ans, message.OriginHost, 0)
			assert.Equal(t, "server.example.net", oh)
			if tt.failed != 0 {
				f, ok := wire.FindAVP(ans, message.FailedAVP, 0)
				require.True(t, ok, "Failed-AVP")
				var inner uint32
				require.NoError(t, wire.WalkGrouped(f, func(a wire.AVP) bool { inner = a.Code; return false }))
				assert.Equal(t, tt.failed, inner)
			}
		})
	}
	assert.Zero(t, handled.Load(), "the handler saw none of them")

	// Reserved header bits are ignored: the request is served.
	ok := hdr(0x0f, good...)
	require.NoError(t, tc.WriteMessages(ok))
	ans, err := tc.ReadMessage()
	require.NoError(t, err)
	rc, _ := message.ResultCodeOf(ans)
	assert.Equal(t, uint32(message.Success), rc)
	assert.Equal(t, int64(1), handled.Load())
	require.Len(t, s.Peers(), 1)
	assert.Equal(t, uint64(len(cases)), s.Peers()[0].Stats().Refused)
}

// A request whose Origin-Host is not its connection's peer is refused
// with 5004 unless that peer is configured as an agent.
func TestOriginHostMustBeTheConnectionsPeer(t *testing.T) {
	var handled atomic.Int64
	h := func(ctx context.Context, p *Peer, req []byte) []byte { handled.Add(1); return acctHandler(ctx, p, req) }
	s := startServer(t, "tcp://127.0.0.1:0", func(c *Config) { c.Handler = h; c.AgentHosts = []string{"agent*.example.net"} })
	spoof := withAVPs(bareACR(0), goodAVPs("victim.example.net")...)

	tc := rawPeer(t, s.Addr().String(), "raw.example.net")
	require.NoError(t, tc.WriteMessages(spoof))
	ans, err := tc.ReadMessage()
	require.NoError(t, err)
	rc, _ := message.ResultCodeOf(ans)
	assert.Equal(t, uint32(message.InvalidAVPValue), rc)
	f, ok := wire.FindAVP(ans, message.FailedAVP, 0)
	require.True(t, ok)
	var inner wire.AVP
	require.NoError(t, wire.WalkGrouped(f, func(a wire.AVP) bool { inner = a; return false }))
	assert.Equal(t, uint32(message.OriginHost), inner.Code)
	assert.Equal(t, "victim.example.net", string(inner.Data))
	assert.Zero(t, handled.Load())

	// Case does not matter (RFC 6733 compares identities without it).
	require.NoError(t, tc.WriteMessages(withAVPs(bareACR(0), goodAVPs("RAW.example.net")...)))
	ans, err = tc.ReadMessage()
	require.NoError(t, err)
	rc, _ = message.ResultCodeOf(ans)
	assert.Equal(t, uint32(message.Success), rc)

	agent := rawPeer(t, s.Addr().String(), "agent1.example.net")
	require.NoError(t, agent.WriteMessages(spoof))
	ans, err = agent.ReadMessage()
	require.NoError(t, err)
	rc, _ = message.ResultCodeOf(ans)
	assert.Equal(t, uint32(message.Success), rc, "an agent forwards others' requests")
	assert.Equal(t, int64(2), handled.Load())
}

// A peer that pipelines requests and never reads the answers: the server
// stops reading that connection at MaxUnanswered, so its goroutines stay
// bounded; once the peer reads, every request is answered.
func TestBackpressureBoundsUnansweredRequests(t *testing.T) {
	const limit = 64
	var inHandler, peak atomic.Int64
	s := startServer(t, "tcp://127.0.0.1:0", func(c *Config) {
		c.MaxUnanswered = limit
		c.Handler = func(ctx context.Context, p *Peer, req []byte) []byte {
			n := inHandler.Add(1)
			for {
				m := peak.Load()
				if n <= m || peak.CompareAndSwap(m, n) {
					break
				}
			}
			defer inHandler.Add(-1)
			return withAVPs(message.NewAnswer(req).ResultCode(message.Success).Bytes(),
				rawAVP(message.UserName, 0x40, 8+4000, make([]byte, 4000))) // big answers fill the socket soon
		}
	})
	before := runtime.NumGoroutine()
	tc := rawPeer(t, s.Addr().String(), "raw.example.net")
	const total = 20000
	sent := make(chan error, 1)
	go func() {
		req := withAVPs(bareACR(0), goodAVPs("raw.example.net")...)
		for i := range total {
			m := append([]byte(nil), req...)
			wire.SetHopByHop(m, uint32(i))
			if err := tc.WriteMessages(m); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	require.Eventually(t, func() bool {
		ps := s.Peers()
		return len(ps) == 1 && ps[0].Stats().Paused > 0
	}, 10*time.Second, 5*time.Millisecond, "the reader pauses")
	sp := s.Peers()[0]
	time.Sleep(200 * time.Millisecond)
	recv := sp.Stats().Received
	assert.Less(t, recv, uint64(total), "the server stopped reading")
	assert.LessOrEqual(t, runtime.NumGoroutine()-before, limit+10, "goroutines bounded by the limit")
	assert.LessOrEqual(t, peak.Load(), int64(limit))
	assert.GreaterOrEqual(t, sp.Stats().Unanswered, limit, "paused at the bound of unanswered requests")

	// Now read: everything is answered, nothing dropped.
	for i := range total {
		ans, err := tc.ReadMessage()
		require.NoError(t, err, "answer %d", i)
		rc, _ := message.ResultCodeOf(ans)
		require.Equal(t, uint32(message.Success), rc)
	}
	require.NoError(t, <-sent)
	// Counted once the write returns: the last answer can be read first.
	assert.Eventually(t, func() bool { return sp.Stats().AnswersSent == total }, 5*time.Second, time.Millisecond,
		"answers sent: %d of %d", sp.Stats().AnswersSent, total)
	assert.Eventually(t, func() bool { return sp.Stats().Unanswered == 0 }, 5*time.Second, time.Millisecond,
		"unanswered once all is answered: %d", sp.Stats().Unanswered)
}

// Silent connections (no CER) are bounded in total and per source
// address; over a limit a new connection pushes out the oldest silent
// one that holds a place it needs (of its own address over the
// per-address limit, else of the address with the most), and a client
// from another address still gets in.
func TestOpeningConnectionsBounded(t *testing.T) {
	cfg := clientConfig("server.example.net")
	cfg.Handler = acctHandler
	s, err := Listen("tcp://127.0.0.1:0", cfg)
	require.NoError(t, err)
	s.MaxOpening, s.MaxOpeningPerAddr = 6, 3
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Close(ctx)
		require.NoError(t, <-done)
	})
	addr := s.Addr().String()
	dialFrom := func(src string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	closedAtOnce := func(c net.Conn, msg string) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := c.Read(make([]byte, 1))
		require.ErrorIs(t, err, io.EOF, msg)
	}
	var first []net.Conn
	for range 3 {
		first = append(first, dialFrom("127.0.0.1"))
		require.Eventually(t, func() bool { return s.Stats().Opening == len(first) }, 5*time.Second, time.Millisecond)
	}
	dialFrom("127.0.0.1")
	closedAtOnce(first[0], "the oldest from the address makes room, long before the CER timeout")
	require.Eventually(t, func() bool { return s.Stats().Opening == 3 }, 5*time.Second, time.Millisecond)
	assert.Zero(t, s.Stats().RefusedOverLimit)
	assert.Equal(t, uint64(1), s.Stats().EvictedUnadmitted)

	// Another address is admitted, up to the total.
	p := dialOkay(t, "tcp://"+addr, func(c *Config) {
		c.Dialer = func(ctx context.Context, url string) (transport.Conn, error) {
			return transport.NewStreamConn(dialFrom("127.0.0.2"), transport.SchemeTCP, transport.Options{}), nil
		}
	})
	_, err = p.Request(bounded(t), acr())
	require.NoError(t, err)
	// p's slot is given back by the goroutine that watched its CER, a
	// moment after the exchange: wait for it, or the dials below meet a
	// slot that is still taken.
	require.Eventually(t, func() bool { return s.Stats().Opening == 3 }, 5*time.Second, time.Millisecond)
	var third []net.Conn
	for range 3 {
		third = append(third, dialFrom("127.0.0.3"))
	}
	require.Eventually(t, func() bool { return s.Stats().Opening == 6 }, 5*time.Second, time.Millisecond)
	dialFrom("127.0.0.4")
	closedAtOnce(first[1], "over the total: the oldest of the address with the most (127.0.0.1 and .3 hold three each) makes room")
	assert.Zero(t, s.Stats().RefusedOverLimit)
	assert.Equal(t, uint64(2), s.Stats().EvictedUnadmitted)
}

// acrFrom is acr() sent by host: a server refuses a request whose
// Origin-Host is not its connection's peer.
func acrFrom(host string) []byte {
	return message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
		String(message.SessionID, 0, true, host+";1;1").
		String(message.OriginHost, 0, true, host).
		String(message.OriginRealm, 0, true, "example.net").
		String(message.DestinationRealm, 0, true, "example.net").
		Uint32(message.AccountingRecordType, 0, true, 2).
		Uint32(message.AccountingRecordNumber, 0, true, 0).Bytes()
}

// A peer that pipelines requests the server refuses before its Handler
// (here a spoofed Origin-Host) and never reads the refusals: the refusals
// waiting to be written count against MaxUnanswered as answers do, so
// the server stops reading and its queue stays bounded.
func TestBackpressureCountsRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 8
		ours, far := pipePair()
		defer far.Close()
		cfg := clientConfig("server.example.net")
		cfg.MaxUnanswered = limit
		cfg.Handler = acctHandler
		s, err := Accept(ours, cfg)
		require.NoError(t, err)
		defer s.Close(context.Background())
		ccfg, err := clientConfig("raw.example.net").validate()
		require.NoError(t, err)
		require.NoError(t, far.WriteMessages(withIDs(ccfg.newCER(far.LocalAddr()), wire.NewHopByHopGenRandom())))
		_, err = far.ReadMessage()
		require.NoError(t, err)

		spoof := withAVPs(bareACR(0), goodAVPs("victim.example.net")...)
		const total = 100
		sent := make(chan int, 1)
		go func() {
			n := 0
			for i := range total {
				m := append([]byte(nil), spoof...)
				wire.SetHopByHop(m, uint32(i))
				if far.WriteMessages(m) != nil {
					break
				}
				n++
			}
			sent <- n
		}()
		synctest.Wait()
		st := s.Stats()
		assert.LessOrEqual(t, st.Received, uint64(limit+2), "read at most MaxUnanswered refused requests (and those in hand)")
		assert.Equal(t, uint64(1), st.Paused)
		go func() {
			for {
				if _, err := far.ReadMessage(); err != nil {
					return
				}
			}
		}()
		assert.Equal(t, total, <-sent, "reading the refusals lets it go on")
		synctest.Wait()
		assert.Equal(t, uint64(total), s.Stats().Refused)
	})
}

// A peer is admitted before its CEA is out: a connection opened as soon
// as the CEA is read, over MaxConnectionsPerAddr, is refused; it never
// takes the place of the admitted peer as of one still waiting for its
// CER.
func TestAdmittedBeforeItsCEA(t *testing.T) {
	cfg := clientConfig("server.example.net")
	cfg.Handler = acctHandler
	s, err := Listen("tcp://127.0.0.1:0", cfg)
	require.NoError(t, err)
	s.MaxConnectionsPerAddr = 1
	// The server's first write (the CEA) returns late, once the client
	// has it: an admission that waits for it comes after the next dial.
	s.Wrap = func(tc transport.Conn) transport.Conn { return &lateFirstWrite{Conn: tc} }
	go s.Serve()
	defer s.Close(bounded(t))
	addr := s.Addr().String()
	for i := range 10 {
		first := rawPeer(t, addr, fmt.Sprintf("first%d.example.net", i))
		over, err := transport.Dial(bounded(t), "tcp://"+addr, transport.Options{})
		require.NoError(t, err)
		over.(transport.ReadDeadliner).SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = over.ReadMessage()
		require.Error(t, err)
		require.NotErrorIs(t, err, os.ErrDeadlineExceeded, "round %d: a second connection from the address is closed at once", i)
		over.Close()
		first.(transport.ReadDeadliner).SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		_, err = first.ReadMessage()
		require.ErrorIs(t, err, os.ErrDeadlineExceeded, "round %d: the admitted peer's connection stays open", i)
		first.Close()
		require.Eventually(t, func() bool { return s.Stats().Open == 0 }, 5*time.Second, time.Millisecond)
	}
	assert.Zero(t, s.Stats().EvictedUnadmitted, "no admitted peer was taken for one waiting for its CER")
}

// lateFirstWrite returns from its first WriteMessages 100 ms after the
// bytes went out.
type lateFirstWrite struct {
	transport.Conn
	once sync.Once
}

func (c *lateFirstWrite) WriteMessages(msgs ...[]byte) error {
	err := c.Conn.WriteMessages(msgs...)
	c.once.Do(func() { time.Sleep(100 * time.Millisecond) })
	return err
}
