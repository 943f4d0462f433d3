package client

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
)

// With MaxConnections, a peer removed by SetPeers while its server is
// unreachable (DOWN, redialing) holds its slot until it is closed; once
// it is, the slot goes to the next configured peer. Its close is no
// watchdog change (DOWN it was, DOWN it stays), yet the slot is freed.
func TestSetPeersRemovedDownPeerFreesItsSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net")}
		defer n.close()
		sw := newSwitchboard(n)
		sw.setDown("tcp://a:1", true) // a's server is unreachable
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:1")
		cfg.Peer.Dialer = sw.dial
		cfg.MaxConnections = 1
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		synctest.Wait()
		_, err = c.SetPeers(context.Background(), []PeerSpec{spec(n, "tcp://b:1")})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ans, err := c.Send(ctx, acr(1, "u"))
		require.NoError(t, err, "b was never dialed: dialed %v, peers %v", sw.dialed(), c.Peers())
		h, _ := message.StringOf(ans, message.OriginHost, 0)
		assert.Equal(t, "b.example.net", h)
	})
}
