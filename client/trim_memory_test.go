package client

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// A peer closed to respect MaxConnections is forgotten once its drain
// has ended: a primary that keeps flapping makes the secondary be dialed
// and released again and again, and the Client's memory of its peers
// stays bounded.
func TestTrimmedPeersForgotten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newFakeServer("a.example.net"), newFakeServer("b.example.net")
		n := network{"tcp://a:1": a, "tcp://b:1": b}
		defer n.close()
		sw := newSwitchboard(n)
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:1", "tcp://b:1")
		cfg.Peer.Dialer = sw.dial
		cfg.MaxConnections = 1
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		synctest.Wait()
		peersKnown := func() (n int) {
			c.byPeer.Range(func(any, any) bool { n++; return true })
			return n
		}
		const flaps = 10
		for i := range flaps {
			sw.setDown("tcp://a:1", true) // a's server goes away: b fills its slot
			a.dropConnections()
			synctest.Wait()
			require.NotNil(t, c.Peers()[1], "flap %d: b fills a's slot", i)
			time.Sleep(6 * time.Minute) // b has worked long enough to be released
			sw.setDown("tcp://a:1", false)
			time.Sleep(2 * time.Minute) // a back in service: b released and drained
			synctest.Wait()
			require.Nil(t, c.Peers()[1], "flap %d: b released", i)
		}
		c.mu.Lock()
		subs := len(c.subs)
		c.mu.Unlock()
		if known := peersKnown(); known > 3 || subs > 3 {
			t.Errorf("after %d flaps the Client knows %d peers and holds %d subscriptions; want at most 3 (a, b, and b's last one draining)", flaps, known, subs)
		}
	})
}
