package client

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/wire"
)

// dropDPA is the client's end of a connection that never sends a DPA:
// the server that sent a DPR waits for it (its DPATimeout) instead of
// closing at once, as a peer across a slow network does.
type dropDPA struct{ transport.Conn }

func (d dropDPA) WriteMessages(msgs ...[]byte) error {
	keep := msgs[:0:0]
	for _, m := range msgs {
		if wire.CommandCode(m) != wire.CmdDisconnectPeer || wire.IsRequest(m) {
			keep = append(keep, m)
		}
	}
	if len(keep) == 0 {
		return nil
	}
	return d.Conn.WriteMessages(keep...)
}

// The primary of a throttled primary/secondary Client sends a DPR while
// one of our requests is pending on it: its connection takes no new
// request from then on, and the requests sent next go to the secondary
// at once. Before, the peer told the Client nothing until the connection
// closed (DPATimeout after the DPR at most, or when the primary gave up
// waiting for its DPA): the throttle kept the primary available, every
// request it released there was refused (ErrDisconnecting), given back
// and released there again, and throttled traffic stalled meanwhile.
func TestPeersDPRSendsNewRequestsToTheSecondaryAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newFakeServer("a.example.net"), newFakeServer("b.example.net")
		a.handle = func(context.Context, *peer.Peer, []byte) []byte { return nil } // never answers
		n := network{"tcp://a:3868": a, "tcp://b:3868": b}
		defer n.close()
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:3868", "tcp://b:3868")
		cfg.Throttle = &Throttle{}
		cfg.Peer.DPATimeout = 30 * time.Second
		cfg.Peer.Dialer = func(ctx context.Context, url string) (transport.Conn, error) {
			tc, err := n.dialer(ctx, url)
			if err == nil && url == "tcp://a:3868" {
				tc = dropDPA{tc}
			}
			return tc, err
		}
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)

		pending := make(chan error, 1)
		go func() {
			_, err := c.Send(context.Background(), acr(0, "user@example.net"))
			pending <- err
		}()
		synctest.Wait()
		require.Len(t, a.received(), 1, "pending on the primary")

		a.mu.Lock()
		srv := a.peers[0]
		a.mu.Unlock()
		go srv.Disconnect(context.Background(), message.DisconnectRebooting)
		synctest.Wait()
		require.False(t, c.Peers()[0].InService(), "the primary's connection takes no new request")

		start := time.Now()
		ans, err := c.Send(context.Background(), acr(1, "user@example.net"))
		require.NoError(t, err)
		host, _ := message.StringOf(ans, message.OriginHost, 0)
		assert.Equal(t, "b.example.net", host)
		assert.Less(t, time.Since(start), time.Second, "the request waited for the primary's connection to close")
		assert.Len(t, a.received(), 1, "a request went to the primary after its DPR")

		// The request pending on the primary moves to the secondary once
		// the primary's connection closes.
		require.NoError(t, <-pending)
	})
}
