package peer

import (
	"context"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// dialPipe opens a client Peer with handler over a net.Pipe whose far end
// the test drives: it has answered the CER, and the Peer is OKAY. Inside
// a synctest bubble.
func dialPipe(t *testing.T, handler Handler) (*Peer, transport.Conn) {
	t.Helper()
	cfg := clientConfig("client.example.net")
	cfg.Handler = handler
	return dialPipeTo(t, cfg, "server.example.net")
}

// dialPipeTo is dialPipe with cfg, to a far end that answers the CER as
// host.
func dialPipeTo(t *testing.T, cfg Config, host string) (*Peer, transport.Conn) {
	t.Helper()
	return dialPipeOver(t, cfg, host, func(a net.Conn) transport.Conn {
		return transport.NewStreamConn(a, "pipe", transport.Options{})
	})
}

// dialPipeOver is dialPipeTo with the client's end of the pipe made a
// connection by client.
func dialPipeOver(t *testing.T, cfg Config, host string, client func(net.Conn) transport.Conn) (*Peer, transport.Conn) {
	t.Helper()
	fars := make(chan transport.Conn, 1)
	cfg.Dialer = func(context.Context, string) (transport.Conn, error) {
		a, b := net.Pipe()
		fars <- transport.NewStreamConn(b, "pipe", transport.Options{})
		return client(a), nil
	}
	p, err := Dial("tcp://"+host+":1", cfg)
	require.NoError(t, err)
	far := <-fars
	t.Cleanup(func() { far.Close() })
	answerCER(t, far, host, message.Success)
	synctest.Wait()
	require.Equal(t, watchdog.Okay, p.State())
	return p, far
}

// serverACR is a request from the far end (server.example.net) with
// Hop-by-Hop id hbh.
func serverACR(hbh uint32) []byte {
	m := message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
		String(message.SessionID, 0, true, "server;1;1").
		String(message.OriginHost, 0, true, "server.example.net").
		String(message.OriginRealm, 0, true, "example.net").
		String(message.DestinationRealm, 0, true, "example.net").
		Uint32(message.AccountingRecordType, 0, true, 2).
		Uint32(message.AccountingRecordNumber, 0, true, 0).Bytes()
	wire.SetHopByHop(m, hbh)
	return m
}

func farDWR(hbh uint32) []byte {
	srv := Config{OriginHost: "server.example.net", OriginRealm: "example.net", OriginStateID: 1}
	m := srv.newDWR()
	wire.SetHopByHop(m, hbh)
	return m
}

func successAnswer(req []byte) []byte {
	return message.NewAnswer(req).ResultCode(message.Success).Bytes()
}

// A Handler that blocks holds the reader up for InlineHandlerTime at most:
// the reading then moves to a new goroutine, which answers the DWR and
// the next requests while the Handler is still blocked; once it returns
// its answer goes out, every request is answered once, and the old reader
// ends.
func TestSlowHandlerHandsReadingOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		p, far := dialPipe(t, func(ctx context.Context, p *Peer, req []byte) []byte {
			if wire.HopByHop(req) == 1 {
				<-release // ignores ctx: blocked until the test says
			}
			return successAnswer(req)
		})
		c := p.cur.Load()
		start := time.Now()
		require.NoError(t, far.WriteMessages(serverACR(1))) // the reader runs its Handler
		require.NoError(t, far.WriteMessages(farDWR(100), serverACR(2), serverACR(3)))
		got := map[uint32]int{}
		for range 3 {
			m, err := far.ReadMessage()
			require.NoError(t, err)
			require.False(t, wire.IsRequest(m))
			got[wire.HopByHop(m)]++
		}
		assert.Equal(t, map[uint32]int{100: 1, 2: 1, 3: 1}, got, "the DWA and the next answers while the Handler is blocked")
		assert.LessOrEqual(t, time.Since(start), DefaultInlineHandlerTime, "held up no longer than the guard's limit")
		assert.Equal(t, uint64(1), c.handovers.Load())

		close(release)
		m, err := far.ReadMessage()
		require.NoError(t, err)
		assert.Equal(t, uint32(1), wire.HopByHop(m), "the slow Handler's answer, once")
		synctest.Wait()
		assert.Zero(t, c.owed.Load())

		// One reader goes on: every later request answered exactly once
		// (by workers for a while: in any order).
		sendAndRead(t, far, 1000, 50)
		synctest.Wait()
		assert.Equal(t, uint64(1), c.handovers.Load())

		// After slowRequests requests on workers, Handlers run on the
		// reader again.
		sendAndRead(t, far, 2000, int(slowRequests))
		synctest.Wait()
		assert.Zero(t, c.slowLeft.Load())
		workers := c.p.cfg.lanes.started()
		sendAndRead(t, far, 3000, 20)
		assert.Equal(t, workers, c.p.cfg.lanes.started(), "no worker after the slow Handler's aftermath")
		closeAnswering(t, p, far)
	})
}

// sendAndRead sends n requests from the far end, Hop-by-Hop ids from
// first on, and reads their answers, each once.
func sendAndRead(t *testing.T, far transport.Conn, first uint32, n int) {
	t.Helper()
	go func() {
		for i := range uint32(n) {
			if far.WriteMessages(serverACR(first+i)) != nil {
				return
			}
		}
	}()
	got := map[uint32]bool{}
	for range n {
		m, err := far.ReadMessage()
		require.NoError(t, err)
		id := wire.HopByHop(m)
		require.False(t, got[id], "answered twice")
		require.True(t, id >= first && id < first+uint32(n))
		got[id] = true
	}
}

// Handlers that wait on each other (a duplicate waiting for its original
// in flight, as dedup.Wrap does, here the other way round too) do not
// deadlock the connection: the one on the reader is handed over.
func TestHandlersWaitingOnEachOtherDoNotDeadlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		secondIn, firstDone := make(chan struct{}), make(chan struct{})
		p, far := dialPipe(t, func(ctx context.Context, p *Peer, req []byte) []byte {
			switch wire.HopByHop(req) {
			case 1:
				<-secondIn // needs request 2 to be read and in its Handler
				defer close(firstDone)
			case 2:
				close(secondIn)
				<-firstDone
			}
			return successAnswer(req)
		})
		require.NoError(t, far.WriteMessages(serverACR(1), serverACR(2)))
		got := map[uint32]int{}
		for range 2 {
			m, err := far.ReadMessage()
			require.NoError(t, err)
			got[wire.HopByHop(m)]++
		}
		assert.Equal(t, map[uint32]int{1: 1, 2: 1}, got)
		assert.Equal(t, uint64(1), p.cur.Load().handovers.Load())
		closeAnswering(t, p, far)
	})
}

// closeAnswering closes p, the far end answering its DPR.
func closeAnswering(t *testing.T, p *Peer, far transport.Conn) {
	t.Helper()
	go func() {
		for {
			m, err := far.ReadMessage()
			if err != nil {
				return
			}
			if wire.CommandCode(m) == wire.CmdDisconnectPeer && wire.IsRequest(m) {
				srv := Config{OriginHost: "server.example.net", OriginRealm: "example.net"}
				far.WriteMessages(srv.newDPA(m))
			}
		}
	}()
	require.NoError(t, p.Close(context.Background()))
}

// A Handler that does not return until its connection closes lets Close
// end cleanly: Close waits for what the connection owes for its drain's
// bound at most, sends the DPR, the reader that took over reads the DPA,
// the answer still owed gets DPATimeout more (one that crossed our DPR
// would be answered then), the connection closes, the Handler returns on
// its ctx and nothing is left running (goleak, TestMain).
func TestHandlerNeverReturningDoesNotHoldClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in := make(chan struct{})
		p, far := dialPipe(t, func(ctx context.Context, p *Peer, req []byte) []byte {
			close(in)
			<-ctx.Done()
			return successAnswer(req)
		})
		c := p.cur.Load()
		require.NoError(t, far.WriteMessages(serverACR(1)))
		<-in
		start := time.Now()
		closeAnswering(t, p, far)
		assert.Equal(t, DefaultRequestTimeout+DefaultDPATimeout, time.Since(start), "Close waited for the drain's bound, then DPATimeout after the DPA")
		select {
		case <-c.dpa:
		default:
			t.Error("the DPA was not read")
		}
		assert.Equal(t, uint64(1), c.handovers.Load())
	})
}

// Fast Handlers run on the reader, one after the other: no worker
// goroutine, no hand-over, answers in the order of the requests, each
// once.
func TestFastHandlersRunOnTheReaderInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var order []uint32
		p, far := dialPipe(t, func(ctx context.Context, p *Peer, req []byte) []byte {
			mu.Lock()
			order = append(order, wire.HopByHop(req))
			mu.Unlock()
			return successAnswer(req)
		})
		c := p.cur.Load()
		const n = 500
		go func() {
			for i := range uint32(n) {
				if far.WriteMessages(serverACR(i)) != nil {
					return
				}
			}
		}()
		for i := range uint32(n) {
			m, err := far.ReadMessage()
			require.NoError(t, err)
			require.Equal(t, i, wire.HopByHop(m), "answers in request order, each once")
		}
		synctest.Wait()
		assert.Len(t, order, n)
		assert.Zero(t, c.p.cfg.lanes.started(), "no worker ran a Handler")
		assert.Zero(t, c.handovers.Load())
		closeAnswering(t, p, far)
	})
}

// Under -race: Handlers around the guard's limit, on a real socket, so
// that hand-overs race with Handlers returning just in time; every
// request is answered exactly once and the connection owes nothing after.
func TestHandOverRacesHandlerReturn(t *testing.T) {
	const limit = 100 * time.Microsecond
	s := startServer(t, "tcp://127.0.0.1:0", func(c *Config) {
		c.InlineHandlerTime = limit
		c.slowRequests = -1 // every Handler on the reader: as many hand-overs as can be
		c.Handler = func(ctx context.Context, p *Peer, req []byte) []byte {
			if id := wire.HopByHop(req); id%4 == 0 {
				time.Sleep(time.Duration(id%7) * limit / 3) // 0 to 2 limits
			}
			return successAnswer(req)
		}
	})
	tc := rawPeer(t, s.Addr().String(), "raw.example.net")
	// OKAY, not only connected: a request read before goes to a worker.
	require.Eventually(t, func() bool { return len(s.Peers()) == 1 && s.Peers()[0].State() == watchdog.Okay }, 10*time.Second, time.Millisecond)
	req := withAVPs(bareACR(0), goodAVPs("raw.example.net")...)
	const n = 3000
	go func() {
		for i := range uint32(n) {
			m := append([]byte(nil), req...)
			wire.SetHopByHop(m, i)
			if tc.WriteMessages(m) != nil {
				return
			}
		}
	}()
	got := make([]int, n)
	for range n {
		m, err := tc.ReadMessage()
		require.NoError(t, err)
		got[wire.HopByHop(m)]++
	}
	for id, k := range got {
		require.Equal(t, 1, k, "request %d answered %d times", id, k)
	}
	c := s.Peers()[0].cur.Load()
	require.Eventually(t, func() bool { return c.owed.Load() == 0 }, 10*time.Second, time.Millisecond)
	assert.Zero(t, c.p.cfg.lanes.started(), "no worker: every request ran on a reader")
	assert.NotZero(t, c.handovers.Load(), "some Handlers outlived the limit")
	t.Logf("%d hand-overs, %d workers started", c.handovers.Load(), c.p.cfg.lanes.started())
}

// Requests that arrive together are answered together: while the read
// buffer holds the next request whole, the reader queues its answer
// without writing it, and the writer sends the lot; the answers are not
// written one by one inline.
func TestBufferedRequestsAnsweredTogether(t *testing.T) {
	s := startServer(t, "tcp://127.0.0.1:0", func(c *Config) {
		// No Handler counts as slow (half the limit), however long the
		// race detector and a busy machine make it: the requests after
		// one would go to workers.
		c.InlineHandlerTime = time.Hour
	})
	tc := rawPeer(t, s.Addr().String(), "raw.example.net")
	// OKAY, not only connected: a request read before goes to a worker.
	require.Eventually(t, func() bool { return len(s.Peers()) == 1 && s.Peers()[0].State() == watchdog.Okay }, 10*time.Second, time.Millisecond)
	c := s.Peers()[0].cur.Load()
	req := withAVPs(bareACR(0), goodAVPs("raw.example.net")...)
	const n = 40
	batch := make([][]byte, n)
	for i := range batch {
		batch[i] = append([]byte(nil), req...)
		wire.SetHopByHop(batch[i], uint32(i))
	}
	require.NoError(t, tc.WriteMessages(batch...)) // one writev: one segment on loopback
	for range n {
		_, err := tc.ReadMessage()
		require.NoError(t, err)
	}
	writers, inline := writeCounts(c)
	assert.Zero(t, c.p.cfg.lanes.started(), "every Handler ran on the reader")
	assert.Less(t, inline, n/4, "answers written one by one: %d inline, %d writers", inline, writers)
	t.Logf("%d answers: %d written inline, %d writer goroutines", n, inline, writers)
}

// A single Handler that took half the guard's limit (as a reader that
// waited for a processor looks) leaves the next requests on the reader;
// two in a row send the next slowRequests to workers.
func TestTwoSlowHandlersInARowMoveRequestsToWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := map[uint32]bool{1: true, 101: true, 102: true}
		p, far := dialPipe(t, func(ctx context.Context, p *Peer, req []byte) []byte {
			if slow[wire.HopByHop(req)] {
				time.Sleep(DefaultInlineHandlerTime * 3 / 5) // slow, not handed over
			}
			return successAnswer(req)
		})
		c := p.cur.Load()
		sendAndRead(t, far, 1, 1)
		sendAndRead(t, far, 2, 20)
		synctest.Wait()
		assert.Zero(t, c.p.cfg.lanes.started(), "one slow Handler: still on the reader")
		assert.Zero(t, c.slowLeft.Load())

		sendAndRead(t, far, 100, 1) // fast
		sendAndRead(t, far, 101, 1)
		sendAndRead(t, far, 102, 1)
		synctest.Wait()
		assert.Equal(t, slowRequests, c.slowLeft.Load(), "two in a row: the next requests go to workers")
		sendAndRead(t, far, 200, 10)
		synctest.Wait()
		assert.NotZero(t, c.p.cfg.lanes.started())
		assert.Zero(t, c.handovers.Load(), "none ran as long as the limit")
		closeAnswering(t, p, far)
	})
}

// Requests that arrive in one burst share one clock reading for their
// arrival, but each Handler's time on the reader counts from its own
// start: a burst of fast Handlers that together run past the limit is
// neither handed over nor sent to workers.
func TestBurstOfFastHandlersStaysOnTheReader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, far := dialPipe(t, func(ctx context.Context, p *Peer, req []byte) []byte {
			time.Sleep(DefaultInlineHandlerTime / 5) // fast, but 20 of them run 4 limits
			return successAnswer(req)
		})
		c := p.cur.Load()
		const n = 20
		batch := make([][]byte, n)
		for i := range batch {
			batch[i] = serverACR(uint32(i + 1))
		}
		go func() { _ = far.WriteMessages(batch...) }()
		for range n {
			m, err := far.ReadMessage()
			require.NoError(t, err)
			require.False(t, wire.IsRequest(m))
		}
		synctest.Wait()
		assert.Zero(t, c.handovers.Load(), "no Handler ran as long as the limit")
		assert.Zero(t, c.p.cfg.lanes.started(), "no Handler counted as slow")
		closeAnswering(t, p, far)
	})
}

// Fast Handlers set no timer of their connection: the guard's goroutine
// (one per Config), started by the first request, ticks while requests
// keep coming, finds no Handler running, and ends once they stop. A timer
// set per request would have run checkInline about once per limit.
func TestFastHandlersSetNoTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, far := dialPipe(t, func(ctx context.Context, p *Peer, req []byte) []byte { return successAnswer(req) })
		c := p.cur.Load()
		g := p.cfg.guard
		for i := range uint32(200) {
			require.NoError(t, far.WriteMessages(serverACR(i)))
			m, err := far.ReadMessage()
			require.NoError(t, err)
			require.Equal(t, i, wire.HopByHop(m))
			time.Sleep(DefaultInlineHandlerTime / 10) // 20 limits in all
		}
		synctest.Wait()
		assert.Zero(t, c.guardChecks.Load(), "no timer ran for a fast Handler")
		g.mu.Lock()
		runs := g.runs
		g.mu.Unlock()
		assert.Equal(t, 1, runs, "started once for the run of requests")
		time.Sleep(2 * guardTick)
		synctest.Wait()
		assert.False(t, g.ticking.Load(), "ended once no Handler was entered")
		closeAnswering(t, p, far)
	})
}

// A Handler that blocks while the guard already ticks (requests have
// been flowing) is handed over no sooner than InlineHandlerTime and no
// later than guardTick after it started: the DWR behind it is answered
// meanwhile.
func TestHandlerBlockingMidRunHandedOverWithinATick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		p, far := dialPipe(t, func(ctx context.Context, p *Peer, req []byte) []byte {
			if wire.HopByHop(req) == 1000 {
				<-release
			}
			return successAnswer(req)
		})
		c := p.cur.Load()
		for i := range uint32(37) { // the guard ticks, at some phase
			require.NoError(t, far.WriteMessages(serverACR(i)))
			_, err := far.ReadMessage()
			require.NoError(t, err)
			time.Sleep(DefaultInlineHandlerTime / 3)
		}
		require.True(t, p.cfg.guard.ticking.Load())
		start := time.Now()
		require.NoError(t, far.WriteMessages(serverACR(1000), farDWR(7)))
		m, err := far.ReadMessage()
		require.NoError(t, err)
		assert.Equal(t, uint32(7), wire.HopByHop(m), "the DWA, while the Handler is blocked")
		took := time.Since(start)
		assert.GreaterOrEqual(t, took, DefaultInlineHandlerTime)
		assert.LessOrEqual(t, took, guardTick)
		assert.Equal(t, uint64(1), c.handovers.Load())
		close(release)
		_, err = far.ReadMessage()
		require.NoError(t, err)
		closeAnswering(t, p, far)
	})
}

// A Handler owns its request and may change it (a relay's Client.Send
// writes its own Hop-by-Hop id into the bytes it forwards): the answer
// still carries the ids the request came with, on the reader, after a
// hand-over and on a worker.
func TestAnswerKeepsIdsOfRequestHandlerChanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		slow := 2
		p, far := dialPipe(t, func(ctx context.Context, p *Peer, req []byte) []byte {
			ans := successAnswer(req)
			wire.SetHopByHop(req, 0xdead)
			wire.SetEndToEnd(req, 0xbeef)
			mu.Lock()
			s := slow > 0
			slow--
			mu.Unlock()
			if s { // the first two: handed over, and the next ones to workers
				time.Sleep(2 * p.cfg.InlineHandlerTime)
			}
			return ans
		})
		c := p.cur.Load()
		const n = 6
		go func() {
			for i := range uint32(n) {
				m := serverACR(i + 1)
				wire.SetEndToEnd(m, 100+i)
				if far.WriteMessages(m) != nil {
					return
				}
			}
		}()
		got := map[uint32]uint32{}
		for range n {
			m, err := far.ReadMessage()
			require.NoError(t, err)
			got[wire.HopByHop(m)] = wire.EndToEnd(m)
		}
		for i := range uint32(n) {
			assert.Equal(t, 100+i, got[i+1], "the answer to Hop-by-Hop %d", i+1)
		}
		assert.NotZero(t, c.handovers.Load(), "a Handler was handed over")
		assert.NotZero(t, c.p.cfg.lanes.started(), "a worker ran a Handler")
		closeAnswering(t, p, far)
	})
}

// A guard whose last connection leaves right after its reader entered a
// Handler (before the guard's first look) ends with that entry still
// noted: the next connection's first Handler must start the guard again,
// or no Handler of a later connection sharing the guard (a client Peer's
// reconnections, a Server's peers) is ever handed over.
func TestGuardStartsAgainAfterItsLastConnectionLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newHandlerGuard(DefaultInlineHandlerTime)
		runs := func() int {
			g.mu.Lock()
			defer g.mu.Unlock()
			return g.runs
		}
		c1 := &conn{}
		g.watch(c1)
		g.entering()  // c1's reader enters a Handler: the guard starts
		g.unwatch(c1) // c1 ends before the guard's first look
		synctest.Wait()
		require.Equal(t, 1, runs())
		require.False(t, g.ticking.Load(), "the guard ended with its last connection")

		c2 := &conn{}
		g.watch(c2)
		g.entering() // c2's reader enters its first Handler
		synctest.Wait()
		assert.Equal(t, 2, runs(), "the guard started again for the next connection")
		g.unwatch(c2)
	})
}
