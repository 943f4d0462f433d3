package client

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// WaitReady(n) that is waiting when SetPeers leaves fewer than n servers
// configured fails then, as it would have had it been called after the
// change ("n larger than the servers configured is an error"), rather
// than wait for its context for servers that are no longer there.
func TestWaitReadyAcrossSetPeers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net")}
		defer n.close()
		sw := newSwitchboard(n)
		sw.setDown("tcp://b:1", true) // b never comes up
		cfg := clientConfig(n, Balance, "tcp://a:1", "tcp://b:1")
		cfg.Peer.Dialer = sw.dial
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- c.WaitReady(ctx, 2) }()
		synctest.Wait()
		_, err = c.SetPeers(context.Background(), []PeerSpec{spec(n, "tcp://a:1")})
		require.NoError(t, err)
		start := time.Now()
		select {
		case err := <-done:
			assert.ErrorContains(t, err, "WaitReady(2) with 1 servers configured")
		case <-time.After(time.Minute):
			t.Fatal("WaitReady(2) still waiting a minute after SetPeers left one server configured")
		}
		assert.Less(t, time.Since(start), time.Second)
		assert.ErrorContains(t, c.WaitReady(ctx, 2), "WaitReady(2) with 1 servers configured", "called after the change: an error at once")
	})
}
