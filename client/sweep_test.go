package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/transport"
)

// With a server down, Pearson remembers the new conversations of the
// buckets that server would take back, to keep them where they started
// when it returns. The Client sweeps that memory: a conversation idle
// past the balancer's IdleTimeout is forgotten, also while no server
// changes state (a server down for days would otherwise have it
// remember every new conversation up to MaxSessions).
func TestPearsonForgetsIdleConversations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net")}
		defer n.close()
		cfg := clientConfig(n, Balance, "tcp://a:1", "tcp://b:1")
		cfg.Peers = append(cfg.Peers, PeerSpec{URL: "tcp://c:1", Name: "c.example.net"})
		cfg.Peer.Dialer = func(ctx context.Context, url string) (transport.Conn, error) {
			if url == "tcp://c:1" {
				return nil, errors.New("connection refused")
			}
			return n.dialer(ctx, url)
		}
		cfg.Balancer.IdleTimeout = time.Minute
		c := started(t, cfg)
		time.Sleep(time.Second)
		synctest.Wait()
		peak := 0
		for i := range 600 { // a new conversation a second for ten minutes
			_, err := c.Send(context.Background(), acr(i, fmt.Sprintf("u%d@example.net", i)))
			require.NoError(t, err)
			peak = max(peak, c.bal.Snapshot().Sessions)
			time.Sleep(time.Second)
		}
		require.NotZero(t, peak, "conversations were remembered (c down: its buckets are watched)")
		// A third of the conversations of the last IdleTimeout, and at most
		// half an IdleTimeout more between sweeps: about 30.
		assert.LessOrEqual(t, c.bal.Snapshot().Sessions, 90, "idle conversations forgotten")
		assert.LessOrEqual(t, peak, 90, "never more than the idle timeout's worth")
	})
}
