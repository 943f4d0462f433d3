package client

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
)

// With MaxConnections, a primary whose server cannot be reached when the
// Client starts never leaves INITIAL (it never was up, so it never goes
// DOWN), yet its slot must go to the next peer in order, as a DOWN one's
// does (F5): otherwise the Client has no server at all while the primary
// stays unreachable.
func TestConnectionLimitPrimaryUnreachableAtStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newFakeServer("a.example.net"), newFakeServer("b.example.net")
		n := network{"tcp://a:1": a, "tcp://b:1": b}
		defer n.close()
		sw := newSwitchboard(n)
		sw.setDown("tcp://a:1", true)
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:1", "tcp://b:1")
		cfg.Peer.Dialer = sw.dial
		cfg.MaxConnections = 1
		var mu sync.Mutex
		var filled []string
		cfg.Events = NewBus()
		cfg.Events.Subscribe(func(_ context.Context, e Event) {
			if e.Kind == EventSlotFilled {
				mu.Lock()
				filled = append(filled, e.Server+": "+e.Reason)
				mu.Unlock()
			}
		})
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		ans, err := c.Send(ctx, acr(1, "u"))
		require.NoError(t, err, "the secondary never got the slot: primary %v, dials %v", c.Peers()[0].State(), sw.dialed())
		h, _ := message.StringOf(ans, message.OriginHost, 0)
		assert.Equal(t, "b.example.net", h)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, []string{"b.example.net: connection slot filled: a.example.net could not be opened"}, filled)
	})
}
