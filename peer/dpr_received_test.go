package peer

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// farDPR is a DPR from the far end (server.example.net) with Hop-by-Hop
// id hbh.
func farDPR(cause, hbh uint32) []byte {
	srv := Config{OriginHost: "server.example.net", OriginRealm: "example.net"}
	m := srv.newDPR(cause)
	wire.SetHopByHop(m, hbh)
	return m
}

// readAll reads far until it fails and hands every message on; the
// channel closes when the read fails (the connection closed).
func readAll(far interface{ ReadMessage() ([]byte, error) }) <-chan []byte {
	ch := make(chan []byte, 64)
	go func() {
		defer close(ch)
		for {
			m, err := far.ReadMessage()
			if err != nil {
				return
			}
			ch <- m
		}
	}()
	return ch
}

// The peer sends a DPR while a request of ours is pending on the
// connection, and answers that request 10 ms after: the answer is
// delivered. We answer the DPR at once (we owe nothing), keep reading
// until our request is answered, and only then close. Before, the
// connection closed as soon as the DPA was written, and the request
// failed with ErrConnectionLost (a Client would have replayed it
// elsewhere, with the T flag, though the peer had applied it).
func TestAnswerAfterPeersDPRIsDelivered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, far := dialPipe(t, nil)
		res := requestAsync(p, context.Background())
		req := readRequest(t, far)
		require.NoError(t, far.WriteMessages(farDPR(message.DisconnectRebooting, 77)))
		got := readAll(far)
		time.Sleep(10 * time.Millisecond)
		require.NoError(t, far.WriteMessages(successAnswer(req)), "the connection is still open")
		r := <-res
		require.NoError(t, r.err)
		assert.Equal(t, wire.EndToEnd(req), wire.EndToEnd(r.ans))

		var dpa []byte
		for m := range got { // ends when we close the connection
			if wire.CommandCode(m) == wire.CmdDisconnectPeer && !wire.IsRequest(m) {
				dpa = m
			}
		}
		require.NotNil(t, dpa, "the DPR was answered")
		assert.Equal(t, uint32(77), wire.HopByHop(dpa))
		synctest.Wait()
		assert.Equal(t, watchdog.Down, p.State(), "closed once nothing was pending")
		require.NoError(t, p.Close(context.Background()))
	})
}

// After the peer's DPR the connection takes no new request, though it
// stays open for the answers to ours: Request is refused with
// ErrDisconnecting and InService is false, so a Client sends elsewhere.
// Once our request is answered the connection closes, its end reported as
// the DPR's, and the peer is redialled at Tw as after any DPR with
// REBOOTING. Before, the Peer stayed in service and put new requests on
// the connection the DPA was about to close.
func TestPeersDPRTakesNoNewRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.Events = NewBus()
		rec, cancel := record(cfg.Events)
		defer cancel()
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		synctest.Wait()
		require.True(t, p.InService())
		f.answerReqs.Store(false)
		res := requestAsync(p, context.Background())
		synctest.Wait()
		require.NoError(t, f.sendDPR(message.DisconnectRebooting))
		synctest.Wait()
		f.mu.Lock()
		assert.Equal(t, 1, f.dpas, "the DPR is answered at once: we owe nothing")
		f.mu.Unlock()

		assert.False(t, p.InService(), "in service after the peer's DPR")
		_, err = p.Request(context.Background(), acr())
		assert.ErrorIs(t, err, ErrDisconnecting)
		f.mu.Lock()
		assert.Equal(t, 1, f.reqs, "a request went out after the DPR")
		f.mu.Unlock()
		assert.Empty(t, rec.ofKind(EventConnDown), "closed with our request pending")

		require.NoError(t, f.answerHeld(false))
		require.NoError(t, (<-res).err)
		synctest.Wait()
		assert.Equal(t, watchdog.Down, p.State())
		down := rec.ofKind(EventConnDown)
		require.Len(t, down, 1)
		assert.Contains(t, down[0].Reason, "DPR received (Disconnect-Cause 0 REBOOTING)")
		assert.False(t, down[0].DPR, "not our DPR")

		time.Sleep(31 * time.Second) // Tw
		synctest.Wait()
		assert.Equal(t, 2, f.dials(), "redialled at Tw")
		f.answerReqs.Store(true)
		ctx, cancel2 := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel2()
		require.NoError(t, p.WaitState(ctx, watchdog.Okay)) // REOPEN counts its DWAs
		require.True(t, p.InService(), "back in service on the new connection")
		_, err = p.Request(context.Background(), acr())
		require.NoError(t, err)
		require.NoError(t, p.Close(context.Background()))
	})
}

// A peer that sent a DPR and never answers our pending request does not
// hold the connection open: it closes DPATimeout after the DPR, the DPA
// sent first, and the request fails as on any lost connection, the
// event saying why.
func TestPeersDPRWaitsForOurAnswersAtMostDPATimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.DPATimeout = 3 * time.Second
		cfg.Events = NewBus()
		rec, cancel := record(cfg.Events)
		defer cancel()
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		synctest.Wait()
		f.answerReqs.Store(false)
		res := requestAsync(p, context.Background())
		synctest.Wait()
		t0 := time.Now()
		require.NoError(t, f.sendDPR(message.DisconnectRebooting))
		r := <-res
		assert.Equal(t, cfg.DPATimeout, time.Since(t0), "closed DPATimeout after the DPR")
		assert.ErrorIs(t, r.err, ErrConnectionLost)
		synctest.Wait()
		f.mu.Lock()
		assert.Equal(t, 1, f.dpas)
		f.mu.Unlock()
		down := rec.ofKind(EventConnDown)
		require.Len(t, down, 1)
		assert.Contains(t, down[0].Reason, "DPR received (Disconnect-Cause 0 REBOOTING); closed 3s after it with 1 of our requests unanswered")
		require.NoError(t, p.Close(context.Background()))
	})
}

// Our DPR crosses a request from the peer: the peer answers the DPR
// while our Handler still runs for that request. The answer goes out
// before the connection closes. Before, the DPA closed the connection at
// once, dropping the answer we owed.
func TestAnswerOwedWhenOurDPRIsAnsweredIsSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := clientConfig("server.example.net")
		cfg.Handler = func(ctx context.Context, p *Peer, req []byte) []byte {
			time.Sleep(100 * time.Millisecond)
			return successAnswer(req)
		}
		ours, far := pipePair()
		defer far.Close()
		p, err := Accept(ours, cfg)
		require.NoError(t, err)
		sendCER(t, far, "client.example.net")
		require.Equal(t, uint32(message.Success), readRC(t, far))
		synctest.Wait()
		require.Equal(t, watchdog.Okay, p.State())

		closed := make(chan error, 1)
		go func() { closed <- p.Close(context.Background()) }()
		dpr := readRequest(t, far)
		require.Equal(t, uint32(wire.CmdDisconnectPeer), wire.CommandCode(dpr))
		req := acr()
		wire.SetHopByHop(req, 42)
		cli := Config{OriginHost: "client.example.net", OriginRealm: "example.net"}
		require.NoError(t, far.WriteMessages(req, cli.newDPA(dpr)))
		got := readAll(far)
		var answered bool
		for m := range got {
			if !wire.IsRequest(m) && wire.HopByHop(m) == 42 {
				answered = true
			}
		}
		assert.True(t, answered, "the answer to the request that crossed our DPR")
		require.NoError(t, <-closed)
	})
}

// A DPA that answers no DPR of ours (its Hop-by-Hop id is not our
// DPR's) is counted and dropped: a later Close still waits for the DPA
// to its own DPR. Before, any DPA, even one received long before, let
// Close go on as if its DPR had been answered.
func TestStrayDPADoesNotAnswerALaterDPR(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, far := dialPipe(t, nil)
		srv := Config{OriginHost: "server.example.net", OriginRealm: "example.net"}
		stray := srv.newDPA(farDPR(message.DisconnectRebooting, 999)) // answers a DPR we never sent
		require.NoError(t, far.WriteMessages(stray))
		synctest.Wait()
		assert.Equal(t, uint64(1), p.Stats().Unmatched)
		assert.Equal(t, watchdog.Okay, p.State())

		go func() {
			for {
				m, err := far.ReadMessage()
				if err != nil {
					return
				}
				if wire.CommandCode(m) == wire.CmdDisconnectPeer && wire.IsRequest(m) {
					time.Sleep(time.Second)
					far.WriteMessages(srv.newDPA(m))
				}
			}
		}()
		t0 := time.Now()
		require.NoError(t, p.Close(context.Background()))
		assert.Equal(t, time.Second, time.Since(t0), "Close waited for the DPA to its DPR")
	})
}

// While the connection waits after the peer's DPR for the answers to our
// requests, Tw expiring sends no DWR: the peer is leaving. (DPATimeout
// here is longer than Tw to let Tw expire meanwhile.)
func TestNoDWRAfterPeersDPR(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.DPATimeout = 40 * time.Second
		cfg.RequestTimeout = time.Minute
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		synctest.Wait()
		f.answerReqs.Store(false)
		res := requestAsync(p, context.Background())
		synctest.Wait()
		require.NoError(t, f.sendDPR(message.DisconnectRebooting))
		time.Sleep(35 * time.Second) // Tw (30 s) expires
		synctest.Wait()
		assert.Empty(t, f.dwrTimes(), "DWR sent after the peer's DPR")
		require.NoError(t, f.answerHeld(false))
		require.NoError(t, (<-res).err)
		synctest.Wait()
		assert.Equal(t, watchdog.Down, p.State())
		require.NoError(t, p.Close(context.Background()))
	})
}

// TestAnswerAfterPeersDPRIsDelivered over loopback TCP, where a caller
// may be reading the connection itself (the baton) when the DPR comes.
func TestAnswerAfterPeersDPRIsDeliveredOverTCP(t *testing.T) {
	p, _, far := dialTCP(t, nil)
	res := requestAsync(p, bounded(t))
	req := readRequest(t, far)
	require.NoError(t, far.WriteMessages(farDPR(message.DisconnectRebooting, 77)))
	dpa, err := far.ReadMessage()
	require.NoError(t, err)
	require.Equal(t, uint32(wire.CmdDisconnectPeer), wire.CommandCode(dpa))
	require.False(t, wire.IsRequest(dpa))
	time.Sleep(10 * time.Millisecond)
	require.NoError(t, far.WriteMessages(successAnswer(req)))
	require.NoError(t, await(t, res).err)
	_, err = far.ReadMessage()
	assert.Error(t, err, "closed once nothing was pending")
	require.NoError(t, p.WaitState(bounded(t), watchdog.Down))
}

// The peer's DPR takes its connection out of service while the watchdog
// stays OKAY: the Peer says so at once with an EventDisconnecting (once,
// however often the peer repeats its DPR), so that a Client's view
// sends elsewhere now rather than when the connection closes. Before,
// nothing was published until the connection closed, DPATimeout later
// at most.
func TestPeersDPRIsAnEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.Events = NewBus()
		rec, cancel := record(cfg.Events)
		defer cancel()
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		synctest.Wait()
		f.answerReqs.Store(false)
		res := requestAsync(p, context.Background())
		synctest.Wait()
		require.NoError(t, f.sendDPR(message.DisconnectBusy))
		require.NoError(t, f.sendDPR(message.DisconnectBusy))
		synctest.Wait()
		ev := rec.ofKind(EventDisconnecting)
		require.Len(t, ev, 1, "one event for the connection")
		assert.Equal(t, "disconnecting", ev[0].Kind.String())
		assert.Contains(t, ev[0].Reason, "DPR received (Disconnect-Cause 1 BUSY)")
		assert.Equal(t, watchdog.Okay, p.State(), "the watchdog has not changed")
		assert.Empty(t, rec.ofKind(EventConnDown))
		require.NoError(t, f.answerHeld(false))
		require.NoError(t, (<-res).err)
		require.NoError(t, p.Close(context.Background()))
	})
}

// The peer sends a DPR (REBOOTING) with one of our requests unanswered,
// restarts and connects to our Server again while the old connection
// still waits for that answer. The new connection ends the wait: the old
// one closes at once, our request goes to the failover hook (the old
// instance will not answer it), and the client Peer of the identity
// adopts the new one, which stays open. Before, the Table gave the new
// connection to the client Peer, which still had the old one: the peer
// got its CEA (2001), then EOF ("another connection is in service").
func TestReconnectionDuringDPRGraceIsAdopted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := NewTable()
		fars := make(chan transport.Conn, 1)
		var mu sync.Mutex
		var moved []*call.Call
		var reasons []string
		cfg := clientConfig("a.example.net")
		cfg.Table, cfg.RemoteHost = tb, "b.example.net"
		cfg.DPATimeout = 30 * time.Second
		cfg.Events = NewBus()
		rec, cancel := record(cfg.Events)
		defer cancel()
		cfg.Failover = func(_ call.Carrier, calls []*call.Call, reason string) {
			mu.Lock()
			moved = append(moved, calls...)
			reasons = append(reasons, reason)
			mu.Unlock()
		}
		cfg.Dialer = func(context.Context, string) (transport.Conn, error) {
			ours, far := pipePair()
			fars <- far
			return ours, nil
		}
		p, err := Dial("tcp://b:1", cfg)
		require.NoError(t, err)
		defer p.Close(context.Background())
		far := <-fars
		defer far.Close()
		answerCER(t, far, "b.example.net", message.Success)
		synctest.Wait()
		require.Equal(t, watchdog.Okay, p.State())

		cl, err := newCall(acr(), false)
		require.NoError(t, err)
		require.NoError(t, p.submit(cl))
		readRequest(t, far)
		require.NoError(t, far.WriteMessages(farDPR(message.DisconnectRebooting, 77)))
		old := readAll(far)
		synctest.Wait()
		require.False(t, p.InService())

		// b restarted: it connects to us (the Server's side of the Table).
		start := time.Now()
		ours, far2 := pipePair()
		defer far2.Close()
		srvCfg := clientConfig("a.example.net")
		srvCfg.Table = tb
		sp, err := Accept(ours, srvCfg)
		require.NoError(t, err)
		defer sp.Close(context.Background())
		sendCER(t, far2, "b.example.net")
		require.Equal(t, uint32(message.Success), readRC(t, far2))
		synctest.Wait()

		for range old { // ends when the old connection closes
		}
		assert.Zero(t, time.Since(start), "the old connection closed at once")
		mu.Lock()
		assert.Equal(t, []*call.Call{&cl.Call}, moved, "our request left the old connection")
		mu.Unlock()
		assert.Equal(t, watchdog.Reopen, p.State(), "the new connection is the Peer's")
		require.NoError(t, far2.WriteMessages(farDWR(5)))
		for { // our DWR (REOPEN), then the DWA to ours
			m, err := far2.ReadMessage()
			require.NoError(t, err, "the new connection was closed")
			if !wire.IsRequest(m) {
				assert.Equal(t, uint32(wire.CmdDeviceWatchdog), wire.CommandCode(m))
				assert.Equal(t, uint32(5), wire.HopByHop(m))
				break
			}
		}
		assert.Empty(t, rec.ofKind(EventError))
		down := rec.ofKind(EventConnDown)
		require.Len(t, down, 1)
		assert.Contains(t, down[0].Reason, "DPR received (Disconnect-Cause 0 REBOOTING)")
		assert.Contains(t, down[0].Reason, "connected again")
	})
}

// With DPATimeout above 2Tw, the watchdog, which sends no DWR after the
// peer's DPR, leaves OKAY when nothing comes for 2Tw and fails over: the
// transition, and the failover it makes, say why (the silence after the
// peer's DPR), not "no DWA within Tw" for a DWR that was never sent, as
// they did before. (The failover empties the connection, which then
// closes: its DPA is out.)
func TestWatchdogAfterPeersDPRSaysWhy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		var mu sync.Mutex
		var reasons []string
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.DPATimeout = 100 * time.Second
		cfg.Events = NewBus()
		rec, cancel := record(cfg.Events)
		defer cancel()
		cfg.Failover = func(_ call.Carrier, calls []*call.Call, reason string) {
			mu.Lock()
			reasons = append(reasons, reason)
			mu.Unlock()
			for _, cl := range calls {
				cl.Fail(ErrConnectionLost)
			}
		}
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		defer p.Close(context.Background())
		synctest.Wait()
		f.answerReqs.Store(false)
		cl, err := newCall(acr(), false)
		require.NoError(t, err)
		require.NoError(t, p.submit(cl))
		synctest.Wait()
		require.NoError(t, f.sendDPR(message.DisconnectRebooting))
		time.Sleep(65 * time.Second) // 2Tw, less than DPATimeout
		synctest.Wait()
		assert.Empty(t, f.dwrTimes(), "DWR sent after the peer's DPR")
		wd := rec.watchdog()
		require.GreaterOrEqual(t, len(wd), 2)
		assert.Equal(t, watchdog.Suspect, wd[1].To)
		assert.Equal(t, watchdog.TimerExpired, wd[1].Trigger)
		assert.NotContains(t, wd[1].Reason, "DWA")
		assert.Contains(t, wd[1].Reason, "after the peer's DPR")
		mu.Lock()
		require.Len(t, reasons, 1)
		assert.Equal(t, wd[1].Reason, reasons[0], "the failover's reason")
		mu.Unlock()
	})
}

// After the peer's DPR, once the DPA is out, the connection closes when
// the last of our requests leaves it. A HandOver that moves that request
// off it decides so under p.mu; the close (which starts a writer to flush
// what is queued) runs after the unlock, as every effect of a step does.
// Before, it ran under p.mu.
func TestCloseAfterPeersDPRRunsAfterTheUnlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var underLock, closes int
		closeAfterFlushHook = func(c *conn) {
			locked := !c.p.mu.TryLock()
			if !locked {
				c.p.mu.Unlock()
			}
			mu.Lock()
			closes++
			if locked {
				underLock++
			}
			mu.Unlock()
		}
		defer func() { closeAfterFlushHook = nil }()
		f := newFakePeer("server.example.net")
		defer f.close()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.Failover = func(_ call.Carrier, calls []*call.Call, _ string) {
			for _, cl := range calls {
				cl.Fail(ErrConnectionLost)
			}
		}
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		defer p.Close(context.Background())
		synctest.Wait()
		f.answerReqs.Store(false)
		cl, err := newCall(acr(), false)
		require.NoError(t, err)
		require.NoError(t, p.submit(cl))
		synctest.Wait()
		c := p.cur.Load()
		require.NoError(t, f.sendDPR(message.DisconnectRebooting))
		synctest.Wait()
		require.True(t, c.dpaOut.Load())
		require.Same(t, c, p.cur.Load(), "open while our request is pending")
		p.HandOver("test", nil, nil)
		synctest.Wait()
		assert.Nil(t, p.cur.Load(), "closed once our request left it")
		mu.Lock()
		assert.Equal(t, 1, closes)
		assert.Zero(t, underLock, "closed under p.mu")
		mu.Unlock()
	})
}
