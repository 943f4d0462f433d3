package client

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/watchdog"
)

// Done is closed once every event has been delivered: each peer's last
// ones, its connection down and its watchdog going DOWN on Close, among
// them.
func TestCloseDeliversPeersLastEvents(t *testing.T) {
	for range 20 {
		synctest.Test(t, func(t *testing.T) {
			n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net")}
			defer n.close()
			cfg := clientConfig(n, Balance, "tcp://a:1", "tcp://b:1")
			cfg.Events = NewBus()
			var mu sync.Mutex
			down := map[string]bool{}
			cfg.Events.Subscribe(func(_ context.Context, e Event) {
				if e.Peer != nil && e.Peer.Kind == peer.EventWatchdog && e.Peer.To == watchdog.Down {
					mu.Lock()
					down[e.Server] = true
					mu.Unlock()
				}
			})
			c, err := New(cfg)
			require.NoError(t, err)
			waitOkay(t, c)
			require.NoError(t, c.Close(context.Background()))
			<-c.Done()
			mu.Lock()
			defer mu.Unlock()
			assert.Equal(t, map[string]bool{"a.example.net": true, "b.example.net": true}, down, "the peers' OKAY -> DOWN on Close, delivered before Done")
		})
	}
}
