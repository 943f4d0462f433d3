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
		stale := make(chan struct{}) // open: the view does not follow the peers
		var holdView atomic.Bool
		beforeRefresh = func() {
			if holdView.Load() {
				<-stale
			}
		}
		var once sync.Once
		follow := func() { // the view follows the peers again
			once.Do(func() {
				holdView.Store(false)
				close(stale)
			})
		}
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

		holdView.Store(true)
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
				n["tcp://b:1"].unfreeze()
				for i := 0; b.State() != watchdog.Okay; i++ {
					if i == 1000 {
						t.Error("b is not OKAY a second after it thawed")
						return
					}
					time.Sleep(time.Millisecond)
				}
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
