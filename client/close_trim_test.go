package client

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/peer"
)

// Close(ctx) returns by ctx's end (with its error) also while a peer
// closed to respect MaxConnections is still draining in the background:
// that drain is not bounded by Close's ctx.
func TestCloseBoundedWhileTrimmedPeerDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newFakeServer("a.example.net"), newFakeServer("b.example.net")
		n := network{"tcp://a:1": a, "tcp://b:1": b}
		defer n.close()
		sw := newSwitchboard(n)
		var slow atomic.Bool
		b.handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte {
			if slow.Load() {
				time.Sleep(10 * time.Minute) // a slow answer keeps b's drain going
			}
			return b.handler(ctx, p, req)
		}
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:1", "tcp://b:1")
		cfg.Peer.Dialer = sw.dial
		cfg.MaxConnections = 1
		released := make(chan struct{}, 1)
		cfg.Events = NewBus()
		cfg.Events.Subscribe(func(_ context.Context, e Event) {
			if e.Kind == EventSlotReleased {
				select {
				case released <- struct{}{}:
				default:
				}
			}
		})
		c, err := New(cfg)
		require.NoError(t, err)
		synctest.Wait()
		sw.setDown("tcp://a:1", true) // a's server goes away
		a.dropConnections()
		synctest.Wait()
		require.NotNil(t, c.Peers()[1], "b fills a's slot")
		time.Sleep(6 * time.Minute) // b has worked long enough to be trimmed
		slow.Store(true)
		sent := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
			defer cancel()
			_, err := c.Send(ctx, acr(1, "u"))
			sent <- err
		}()
		synctest.Wait()
		sw.setDown("tcp://a:1", false) // a comes back: b is surplus
		select {
		case <-released:
		case <-time.After(5 * time.Minute):
			t.Fatal("b was not released")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		err = c.Close(ctx)
		took := time.Since(start)
		t.Logf("Close took %v: %v", took, err)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.LessOrEqual(t, took, time.Second, "Close(ctx of 100ms) took %v", took)
		<-sent
		<-c.Done()
	})
}
