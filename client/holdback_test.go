package client

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// A request picked before a flush that left an earlier request of its
// batch waiting waits behind it, even when its own peer takes requests
// again a moment later. In one batch x is picked for a and y for b; a
// refuses x (a is SUSPECT, the view not yet), and so does b, so x waits;
// b is OKAY again before y is placed. y must not leave ahead of x: both
// wait, and go to b in batch order once the view changes. The same with
// both naming in Destination-Host a host that is not a peer (a home server
// behind a relay): they route as requests without one do, and wait as
// they do.
func TestBatchHoldsBackAfterFlush(t *testing.T) {
	for _, host := range []string{"", "hss.example.net"} {
		t.Run("Destination-Host="+host, func(t *testing.T) { batchHoldsBackAfterFlush(t, host) })
	}
}

// acrForAt is acrFor with Destination-Host host (none if "").
func acrForAt(t *testing.T, c *Client, server, host string) []byte {
	t.Helper()
	if host == "" {
		return acrFor(t, c, server)
	}
	for i := range 1000 {
		nai := "u" + itoa(i) + "@example.net"
		if s, err := c.bal.Pick(loadbalance.Request{NAI: nai}); err == nil && s.Name == server {
			return acrTo(i, nai, host)
		}
	}
	t.Fatalf("no NAI goes to %s", server)
	return nil
}

func batchHoldsBackAfterFlush(t *testing.T, host string) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net")}
		defer n.close()
		holdView, follow := staleView()
		defer func() { beforeRefresh = nil }()
		c, err := New(clientConfig(n, Balance, "tcp://a:1", "tcp://b:1"))
		require.NoError(t, err)
		defer func() {
			follow() // also when the test fails early: Close waits for the peers' notifiers
			c.Close(context.Background())
			<-c.Done()
		}()
		waitOkay(t, c)
		var b *peer.Peer
		for _, p := range c.Peers() {
			if p.Name() == "b.example.net" {
				b = p
			}
		}
		x, y := acrForAt(t, c, "a.example.net", host), acrForAt(t, c, "b.example.net", host)
		wire.SetEndToEnd(x, 1)
		wire.SetEndToEnd(y, 2)

		holdView()
		n["tcp://a:1"].freeze()
		n["tcp://b:1"].freeze()
		time.Sleep(70 * time.Second) // both SUSPECT at 2 Tw, both still open in the view
		synctest.Wait()
		for _, p := range c.Peers() {
			require.Equal(t, watchdog.Suspect, p.State(), p.Name())
		}
		var whys []string
		onWait = func(_ *call.Call, _ *avail, why string) {
			whys = append(whys, why)
			if len(whys) == 1 { // x, refused by a and by b: b comes back now
				thawUntilOkay(t, n["tcp://b:1"], b)
			}
		}
		defer func() { onWait = nil }()
		xc, err := peer.NewCall(x, false)
		require.NoError(t, err)
		yc, err := peer.NewCall(y, false)
		require.NoError(t, err)
		xc.Deadline = time.Now().Add(time.Hour)
		yc.Deadline = xc.Deadline
		to := c.dispatchAll([]*call.Call{xc, yc})
		assert.Equal(t, []string{"no other peer took it (refused by a.example.net)", "held back"}, whys)
		if to[1].to != nil {
			t.Errorf("y went to %s ahead of x, which waits", to[1].to.spec.Name)
		}

		follow()
		for _, cl := range []*call.Call{xc, yc} {
			r := cl.Await(context.Background(), time.Hour)
			require.NoError(t, r.Err)
			assert.Equal(t, "b.example.net", r.By.Name())
		}
		var order []uint32
		for _, s := range n["tcp://b:1"].received() {
			order = append(order, s.e2e)
		}
		assert.Equal(t, []uint32{1, 2}, order, "b got the batch in its order")
	})
}

// A request a peer refused, waiting because every other peer open in the
// view avoids it (it is still pending on their connections), holds back
// the requests after it in its batch that would reach that peer: the
// refusal may be of a moment, and the peer takes them again before they
// are placed. x is pending on b and picked for a, which refuses it (a is
// SUSPECT, the view not yet); a is OKAY again before the rest of the
// batch is placed. "picked": z, picked for a, must not leave ahead of x.
// "retried": y, picked for b and refused by b (SUSPECT too), must not be
// placed on a ahead of x. Both wait for the view to change.
func TestBatchWaitsBehindARefusedRequest(t *testing.T) {
	t.Run("picked", func(t *testing.T) { batchWaitsBehindARefusal(t, false) })
	t.Run("retried", func(t *testing.T) { batchWaitsBehindARefusal(t, true) })
}

func batchWaitsBehindARefusal(t *testing.T, retried bool) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net")}
		release := holdFirst(n["tcp://b:1"]) // b holds x until released
		defer func() { release(); n.close() }()
		holdView, follow := staleView()
		defer func() { beforeRefresh = nil }()
		c, err := New(clientConfig(n, Balance, "tcp://a:1", "tcp://b:1"))
		require.NoError(t, err)
		defer func() {
			follow()
			n["tcp://b:1"].unfreeze()
			c.Close(context.Background())
			<-c.Done()
		}()
		waitOkay(t, c)
		var a *peer.Peer
		for _, p := range c.Peers() {
			if p.Name() == "a.example.net" {
				a = p
			}
		}
		xc, yc, zc := xInFlightOnB(t, c, n)

		holdView()
		n["tcp://a:1"].freeze()
		if retried {
			n["tcp://b:1"].freeze()
		}
		time.Sleep(70 * time.Second) // SUSPECT at 2 Tw, still open in the view
		synctest.Wait()
		require.Equal(t, watchdog.Suspect, a.State())
		var whys []string
		onWait = func(_ *call.Call, _ *avail, why string) {
			whys = append(whys, why)
			if len(whys) == 1 { // x, refused by a: a comes back now
				thawUntilOkay(t, n["tcp://a:1"], a)
			}
		}
		defer func() { onWait = nil }()
		batch := []*call.Call{xc, yc, zc}
		to := c.dispatchAll(batch)
		require.Equal(t, "no other peer took it (refused by a.example.net)", whys[0])
		for i, p := range to {
			if i > 0 && p.to != nil && p.to.spec.Name == "a.example.net" {
				t.Errorf("request %d went to a ahead of x, which waits (waits: %q)", i+1, whys)
			}
		}

		// x stays in flight on b (a refusal does not take it off the
		// connection it was sent on); once b answers it and the view
		// follows the peers, y and z go.
		follow()
		n["tcp://b:1"].unfreeze()
		release()
		for _, cl := range batch {
			r := cl.Await(context.Background(), time.Hour)
			require.NoError(t, r.Err, "request %d (waits: %q)", cl.Ref, whys)
		}
	})
}

// A request a peer in service refused for itself (in flight on another
// connection) holds back nothing: no view change follows such a refusal,
// and a request held behind it would wait for its deadline. x is in flight
// on b and picked for a, which refuses it; z, picked for a, goes there.
func TestBatchNotHeldBehindARequestsOwnRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net")}
		release := holdFirst(n["tcp://b:1"]) // b holds x until released
		defer func() { release(); n.close() }()
		c, err := New(clientConfig(n, Balance, "tcp://a:1", "tcp://b:1"))
		require.NoError(t, err)
		defer func() {
			c.Close(context.Background())
			<-c.Done()
		}()
		waitOkay(t, c)
		xc, yc, zc := xInFlightOnB(t, c, n)

		var whys []string
		onWait = func(_ *call.Call, _ *avail, why string) { whys = append(whys, why) }
		defer func() { onWait = nil }()
		to := c.dispatchAll([]*call.Call{xc, yc, zc})
		require.NotNil(t, to[2].to, "z waits (waits: %q)", whys)
		assert.Equal(t, "a.example.net", to[2].to.spec.Name)
		release()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, cl := range []*call.Call{xc, yc, zc} {
			require.NoError(t, cl.Await(ctx, time.Hour).Err, "request %d (waits: %q)", cl.Ref, whys)
		}
	})
}

// holdFirst has server f hold the request with End-to-End id 1 unanswered
// until the function it returns is called (once or more).
func holdFirst(f *fakeServer) (release func()) {
	ch := make(chan struct{})
	f.handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte {
		if wire.EndToEnd(req) == 1 {
			select {
			case <-ch:
			case <-ctx.Done():
			}
		}
		return f.handler(ctx, p, req)
	}
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// xInFlightOnB returns the batch of the refusal tests, each with an hour
// to live: x (End-to-End id 1) and z picked for a, y for b; x is sent to
// b first, which holds it (holdFirst).
func xInFlightOnB(t *testing.T, c *Client, n network) (xc, yc, zc *call.Call) {
	t.Helper()
	var bm *member
	for _, m := range c.ros.Load().all {
		if m.spec.Name == "b.example.net" {
			bm = m
		}
	}
	newCall := func(msg []byte, e2e uint32) *call.Call {
		wire.SetEndToEnd(msg, e2e)
		cl, err := peer.NewCall(msg, false)
		require.NoError(t, err)
		cl.Deadline = time.Now().Add(time.Hour)
		return cl
	}
	xc = newCall(acrFor(t, c, "a.example.net"), 1)
	yc = newCall(acrFor(t, c, "b.example.net"), 2)
	zc = newCall(acrFor(t, c, "a.example.net"), 3)
	refused, _ := c.submitRun(bm, []*call.Call{xc})
	require.Empty(t, refused, "b takes x")
	synctest.Wait()
	require.Len(t, n["tcp://b:1"].received(), 1, "b holds x")
	return xc, yc, zc
}

// staleView has the Client's views stop following the peers from hold
// on (beforeRefresh waits) until follow (called once or more); the caller
// sets beforeRefresh back to nil.
func staleView() (hold, follow func()) {
	stale := make(chan struct{})
	var held atomic.Bool
	beforeRefresh = func() {
		if held.Load() {
			<-stale
		}
	}
	var once sync.Once
	return func() { held.Store(true) }, func() {
		once.Do(func() {
			held.Store(false)
			close(stale)
		})
	}
}

// thawUntilOkay thaws f and waits up to a second for its peer p to be
// OKAY again.
func thawUntilOkay(t *testing.T, f *fakeServer, p *peer.Peer) {
	f.unfreeze()
	for i := 0; p.State() != watchdog.Okay; i++ {
		if i == 1000 {
			t.Errorf("%s is not OKAY a second after it thawed", p.Name())
			return
		}
		time.Sleep(time.Millisecond)
	}
}
