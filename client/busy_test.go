package client

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/wire"
)

// A radius:// server busy when a request first came is offered it again
// once the request's next server never replied: being turned away busy is
// no send, and the "each server at most once" rule does not count it (it
// did, when a busy server was recorded as a refuser, and the request
// ended with b's silence, never tried at s, free by then).
func TestBusyUDPServerTriedAgain(t *testing.T) {
	s, b := newSilentUDP(t), newSilentUDP(t)
	c := udpClient(t, PrimarySecondary, []PeerSpec{{URL: s.url(), Name: "s"}, {URL: b.url(), Name: "b"}}, func(cfg *Config) {
		cfg.UDP.Timeout = 300 * time.Millisecond
		cfg.UDP.Retries = 2
		cfg.UDP.MaxSockets = 1
		cfg.UDP.MaxWaiting = 1
	})
	up := c.UDPPeers()[0]
	free := fillUDP(t, up, radpeer.IDsPerSocket+1) // every Identifier, and the one waiting place
	errc := make(chan error, 1)
	go func() {
		_, err := c.Exchange(context.Background(), udpAccess("late-user"))
		errc <- err
	}()
	require.Eventually(t, func() bool {
		for _, d := range b.datagrams() {
			if bytes.Contains(d, []byte("late-user")) {
				return true
			}
		}
		return false
	}, 3*time.Second, 5*time.Millisecond, "s busy: the request goes to b")
	free() // s frees its Identifiers (after one Timeout)
	err := <-errc
	atS := false
	for _, d := range s.datagrams() {
		if bytes.Contains(d, []byte("late-user")) {
			atS = true
		}
	}
	require.True(t, atS, "b never replied and s, busy only when the request first came, was not tried again: %v", err)
}

// Being turned away busy holds until the request's next send: a request
// that a radius+tcp:// server a turned away busy, then sent to b and lost
// there, goes back to a, which has room again by then, and is answered.
// It ended with a's old ErrBusy when a busy server counted as a refuser.
// (That the busy word is forgotten at the next send: call.TestTurnAway.)
func TestBusyForgottenOnceSentElsewhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, c, stop := radPair(t, nil, func(cfg *Config) {
			cfg.RADIUS.MaxConns = 1
			cfg.RADIUS.MaxWaiting = 1
		})
		defer stop()
		_, err := c.Exchange(context.Background(), accessRequest("u0"))
		require.NoError(t, err)
		a.silent.Store(true)
		wctx, wcancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i := range 256 { // 255 Identifiers and the one waiting place
			wg.Go(func() { c.Exchange(wctx, accessRequest(fmt.Sprint("w", i))) })
		}
		synctest.Wait()
		require.Equal(t, 1, c.RADIUSPeers()[0].Stats().Waiting, "a full")
		b.silent.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		errc := make(chan error, 1)
		go func() {
			_, err := c.Exchange(ctx, accessRequest("x"))
			errc <- err
		}()
		synctest.Wait()
		require.Contains(t, b.arrivals(), "x", "a busy: x went to b")
		wcancel() // a has room again
		wg.Wait()
		a.silent.Store(false)
		b.faults.Reset() // b's connection closes: x is lost there
		synctest.Wait()
		require.NoError(t, <-errc, "x, lost on b, goes back to a")
		require.Contains(t, a.arrivals(), "x")
	})
}

// A batch (a failover's replays, a waiter's round) reaching a server that
// turns away the second of three busy: the second and the third, turned
// away with it unsent (the rest of the batch), end with ErrBusy at once;
// the third waited for a view change that does not come.
func TestBusyBatchRestEndsBusy(t *testing.T) {
	s := newSilentUDP(t)
	c := udpClient(t, PrimarySecondary, []PeerSpec{{URL: s.url(), Name: "s"}}, func(cfg *Config) {
		cfg.UDP.Timeout = 5 * time.Second
		cfg.UDP.Retries = 1
		cfg.UDP.MaxSockets = 1
		cfg.UDP.MaxWaiting = 1
	})
	up := c.UDPPeers()[0]
	fillUDP(t, up, radpeer.IDsPerSocket) // every Identifier; the waiting place free
	r1, r2, r3 := radpeer.NewCall(udpAccess("r1")), radpeer.NewCall(udpAccess("r2")), radpeer.NewCall(udpAccess("r3"))
	for _, cl := range []*call.Call{r1, r2, r3} {
		cl.Deadline = time.Now().Add(time.Minute)
	}
	defer r1.Fail(context.Canceled)
	defer r3.Fail(context.Canceled)
	out := c.dispatchAll([]*call.Call{r1, r2, r3})
	require.True(t, out[1].concluded, "r2 ended busy")
	r := r3.Await(context.Background(), 2*time.Second)
	require.ErrorIs(t, r.Err, radpeer.ErrBusy, "r3, turned away with r2 (placement %+v)", out[2])
}

// A waiter's round (dispatchAll) placing a first send on a radius+tcp://
// server with no Identifier free: the request waits in the peer, unboarded,
// and is counted Sent there, as the same request placed alone
// (Client.submit) is.
func TestSentCountsWaitingFirstSend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, _, c, stop := radPair(t, nil, func(cfg *Config) {
			cfg.RADIUS.MaxConns = 1
		})
		defer stop()
		_, err := c.Exchange(context.Background(), accessRequest("u0"))
		require.NoError(t, err)
		a.silent.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		for i := range 255 { // every Identifier of a's one connection
			wg.Go(func() { c.Exchange(ctx, accessRequest(fmt.Sprint("w", i))) })
		}
		synctest.Wait()
		before := c.ServerStats()[0].Sent
		cl := radpeer.NewCall(accessRequest("r1"))
		cl.Deadline = time.Now().Add(time.Minute)
		out := c.dispatchAll([]*call.Call{cl})
		require.NotNil(t, out[0].to)
		require.Equal(t, 1, c.RADIUSPeers()[0].Stats().Waiting, "r1 waits for an Identifier at a")
		after := c.ServerStats()[0].Sent
		cl.Fail(context.Canceled)
		cancel()
		wg.Wait()
		require.Equal(t, before+1, after, "r1 was first sent to a")
	})
}

// A batch [auth r1, acct r3] reaching a radius:// server with an
// AccountingURL whose authentication address is full (every Identifier,
// the waiting place) while its accounting address has room: r1 is turned
// away busy, and r3 is taken. It was turned away with r1, unsubmitted,
// and ended with ErrBusy though the server had room for it.
func TestBusyBatchOtherAddressTaken(t *testing.T) {
	s, acct := newSilentUDP(t), newSilentUDP(t)
	c := udpClient(t, PrimarySecondary, []PeerSpec{{URL: s.url(), Name: "s", AccountingURL: acct.url()}}, func(cfg *Config) {
		cfg.UDP.Timeout = 5 * time.Second
		cfg.UDP.Retries = 1
		cfg.UDP.MaxSockets = 1
		cfg.UDP.MaxWaiting = 1
	})
	up := c.UDPPeers()[0]
	fillUDP(t, up, radpeer.IDsPerSocket+1) // every auth Identifier and the auth waiting place
	r1, r3 := radpeer.NewCall(udpAccess("r1")), radpeer.NewCall(udpAcctStop("r3"))
	for _, cl := range []*call.Call{r1, r3} {
		cl.Deadline = time.Now().Add(time.Minute)
	}
	defer r3.Fail(context.Canceled)
	out := c.dispatchAll([]*call.Call{r1, r3})
	require.True(t, out[0].concluded, "r1 ended busy: the auth address is full")
	require.NotNil(t, out[1].to, "r3 taken by s (placement %+v)", out[1])
	require.Eventually(t, func() bool { return len(acct.datagrams()) > 0 }, 3*time.Second, 5*time.Millisecond, "r3 sent to the accounting address")
	r := r3.Await(context.Background(), 500*time.Millisecond)
	require.NotErrorIs(t, r.Err, radpeer.ErrBusy, "r3, an Accounting-Request, ended busy: the accounting address had room (placement %+v, datagrams there %d)", out[1], len(acct.datagrams()))
}

// The busy word does not outlive a taking: x, turned away busy by a,
// waits for an Identifier at b (a radius+tcp:// peer's waiting list, no
// send yet). b's connection drops while a is out of service: x waits for a
// server as b's lost requests do. It ended at once with a's old ErrBusy
// (only a send forgot the word).
func TestBusyForgottenOnceTakenElsewhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, c, stop := radPair(t, nil, func(cfg *Config) {
			cfg.RADIUS.MaxConns = 1
			cfg.RADIUS.MaxWaiting = 1
		})
		defer stop()
		_, err := c.Exchange(context.Background(), accessRequest("u0"))
		require.NoError(t, err)
		a.silent.Store(true)
		b.silent.Store(true)
		actx, acancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i := range 256 { // a: 255 Identifiers and the one waiting place
			wg.Go(func() { c.Exchange(actx, accessRequest(fmt.Sprint("a", i))) })
		}
		synctest.Wait()
		require.Equal(t, 1, c.RADIUSPeers()[0].Stats().Waiting, "a full")
		bctx, bcancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer bcancel()
		var berrs sync.Map
		for i := range 255 { // turned away by a, sent to b: b's Identifiers
			wg.Go(func() {
				_, err := c.Exchange(bctx, accessRequest(fmt.Sprint("b", i)))
				berrs.Store(i, err)
			})
		}
		synctest.Wait()
		xerr := make(chan error, 1)
		go func() {
			_, err := c.Exchange(bctx, accessRequest("x"))
			xerr <- err
		}()
		synctest.Wait()
		require.Equal(t, 1, c.RADIUSPeers()[1].Stats().Waiting, "x waits at b for an Identifier")
		acancel() // a's requests end
		synctest.Wait()
		a.faults.Freeze() // a goes silent: out of service after its watchdog
		time.Sleep(20 * time.Second)
		synctest.Wait()
		require.False(t, c.RADIUSPeers()[0].InService(), "a out of service")
		select {
		case err := <-xerr:
			t.Fatalf("x ended before b's connection dropped: %v", err)
		default:
		}
		b.faults.Reset() // b's connection drops: its requests, and x, are handed over
		synctest.Wait()
		select {
		case err := <-xerr:
			busy := 0
			berrs.Range(func(_, v any) bool {
				if e, _ := v.(error); e != nil {
					busy++
				}
				return true
			})
			t.Fatalf("x ended at the hand-over (%d of b's requests ended too): %v", busy, err)
		default:
		}
		a.faults.Thaw()
		a.silent.Store(false)
		b.silent.Store(false)
		bcancel()
		wg.Wait()
	})
}

// Through the throttle, a request a failover hands over that names a
// peer the connection limit closed fails as undeliverable, with its
// failover record, as without a throttle (the "dispatch" half of
// TestNewRequestPinnedToTrimmedPeerUndeliverable). No record said so: it
// was taken for queued in the throttle, to be recorded where it leaves.
func TestThrottleUndeliverableFailoverRecorded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, cc := newFakeServer("a.example.net"), newFakeServer("b.example.net"), newFakeServer("c.example.net")
		n := network{"tcp://a:1": a, "tcp://b:1": b, "tcp://c:1": cc}
		defer n.close()
		sw := newSwitchboard(n)
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:1", "tcp://b:1", "tcp://c:1")
		cfg.MaxConnections = 2
		cfg.Peer.Dialer = sw.dial
		cfg.Throttle = &Throttle{}
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		synctest.Wait()
		sw.setDown("tcp://a:1", true)
		a.dropConnections()
		synctest.Wait()
		require.NotNil(t, c.Peers()[2], "the third peer fills the slot")
		sw.setDown("tcp://a:1", false)
		time.Sleep(31*time.Second + 61*time.Second + 5*time.Minute)
		synctest.Wait()
		require.Nil(t, c.Peers()[2], "c was closed to respect the limit")

		req := acrTo(4, "u@example.net", "c.example.net")
		wire.SetEndToEnd(req, 4343)
		cl, err := peer.NewCall(req, false)
		require.NoError(t, err)
		cl.Deadline = time.Now().Add(time.Hour)
		it := c.newItem(cl, c.monoNow().Add(time.Hour))
		defer c.release(it)
		c.onFailover(c.Peers()[0], []*call.Call{cl}, "test failover")
		_, err = cl.Wait(context.Background(), time.Hour)
		require.ErrorIs(t, err, ErrUnableToDeliver)
		synctest.Wait()
		recs, _ := c.FailoverLog()
		found := false
		for _, r := range recs {
			for _, id := range r.EndToEnd {
				if id == 4343 {
					found = true
				}
			}
		}
		require.True(t, found, "no failover record names the request that failed as undeliverable: %+v", recs)
	})
}

// A first send that waits for an Identifier at radius+tcp:// server a is
// counted Sent at a; a loses service with it still waiting, and b, which
// takes it then (its first boarding), does not count it again: one
// request, one Sent.
func TestSentOnceAfterWaitingHandOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, _, c, stop := radPair(t, nil, func(cfg *Config) {
			cfg.RADIUS.MaxConns = 1
		})
		defer stop()
		_, err := c.Exchange(context.Background(), accessRequest("u0"))
		require.NoError(t, err)
		a.silent.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		var wg sync.WaitGroup
		for i := range 255 {
			wg.Go(func() { c.Exchange(ctx, accessRequest(fmt.Sprint("w", i))) })
		}
		synctest.Wait()
		before := c.ServerStats()
		xerr := make(chan error, 1)
		go func() {
			_, err := c.Exchange(ctx, accessRequest("x"))
			xerr <- err
		}()
		synctest.Wait()
		require.Equal(t, 1, c.RADIUSPeers()[0].Stats().Waiting, "x waits at a")
		a.silent.Store(false)
		a.faults.Reset() // a's connection drops: x (waiting) is handed over to b
		synctest.Wait()
		require.NoError(t, <-xerr)
		cancel()
		wg.Wait()
		after := c.ServerStats()
		// The 255 w requests were first sent to a (counted there before);
		// x is the only new request.
		sentA, sentB := after[0].Sent-before[0].Sent, after[1].Sent-before[1].Sent
		require.Equal(t, uint64(1), sentA+sentB, "x counted Sent at a (%d) and at b (%d)", sentA, sentB)
	})
}

// fillUDP takes n of up's places (its Identifiers, then its waiting
// places) with requests sent around the Client, which never end by
// themselves; free ends them, as the test's end does.
func fillUDP(t *testing.T, up *radpeer.UDPPeer, n int) (free func()) {
	t.Helper()
	var fill []*call.Call
	for i := range n {
		cl := radpeer.NewCall(udpAccess("fill" + itoa(i)))
		cl.Deadline = time.Now().Add(time.Minute)
		require.NoError(t, up.Submit(cl))
		fill = append(fill, cl)
	}
	free = func() {
		for _, cl := range fill {
			cl.Fail(context.Canceled)
		}
	}
	t.Cleanup(free)
	return free
}
