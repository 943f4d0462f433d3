package client

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A request whose connection was lost and that finds no server in
// service before its deadline fails as a timeout that says what became
// of the connection, not only that time ran out.
func TestFailAfterLostConnectionNamesTheLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:3868": newFakeServer("a.example.net")}
		defer n.close()
		c, err := New(clientConfig(n, PrimarySecondary, "tcp://a:3868"))
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)
		n["tcp://a:3868"].freeze()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		go func() {
			time.Sleep(time.Second)
			n["tcp://a:3868"].dropConnections()
		}()
		_, err = c.Send(ctx, acr(1, "u"))
		require.ErrorIs(t, err, ErrTimeout)
		assert.Contains(t, err.Error(), "after a failover: connection down (closed by peer)", err.Error())
	})
}

// A server the Client cannot connect to is named, with why, in the error
// of a wait for it and of a request that found no server, and in its
// statistics until it connects.
func TestNotInServiceSaysWhy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net")}
		defer n.close()
		sw := newSwitchboard(n)
		sw.setDown("tcp://a:1", true)
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:1")
		cfg.Peer.Dialer = sw.dial
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err = c.WaitReady(ctx, 1)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.ErrorContains(t, err, "a.example.net INITIAL, open failed: connection refused")
		_, err = c.Send(ctx, acr(1, "u"))
		require.ErrorIs(t, err, ErrNoPeer)
		assert.ErrorContains(t, err, "a.example.net INITIAL, open failed: connection refused")
		assert.Equal(t, "connection refused", c.ServerStats()[0].OpenError)

		sw.setDown("tcp://a:1", false)
		require.NoError(t, c.WaitReady(context.Background(), 1))
		assert.Empty(t, c.ServerStats()[0].OpenError, "connected since")
	})
}
