package client

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/watchdog"
)

// A request whose deadline passes in the throttle's queue while its
// server is in service (held by a rate limit) is a timeout, not "no peer
// in service": errors.Is(err, ErrNoPeer) is false, and the metrics count
// it as "timeout" (ErrorReasons: "the deadline passing in a throttle
// queue included"), not "no_peer".
func TestThrottleExpiryIsNotNoPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net")}
		defer n.close()
		cfg := clientConfig(n, Balance, "tcp://a:1")
		cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxRate: 20}, Slot: 50 * time.Millisecond} // 1 a slot
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)
		const N = 20
		errs := make(chan error, N)
		for i := range N {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				_, err := c.Send(ctx, acr(i, "u@example.net"))
				errs <- err
			}()
		}
		// Held by the rate limit, some fail at their deadline: by the
		// throttle's expiry or by their caller's context, whichever fires
		// first (the same instant).
		failed := 0
		for range N {
			err := <-errs
			if err == nil {
				continue
			}
			failed++
			assert.ErrorIs(t, err, ErrTimeout)
			assert.False(t, errors.Is(err, ErrNoPeer), "its server was in service all along: %v", err)
		}
		require.NotZero(t, failed, "no request failed at its deadline in the throttle's queue")
		u := c.UnsentErrors()
		assert.Zero(t, u["no_peer"], "counted as no_peer: %v", u)
		assert.Equal(t, uint64(failed), u["timeout"], "not all counted as timeouts: %v", u)
	})
}

// A request moved off a connection that went SUSPECT (no DWA within Tw)
// was not lost with it: the connection is still open and a late answer
// there still completes the call (F4). Its error says it failed over and
// why, not that its connection was lost.
func TestSuspectFailoverCauseWording(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:3868": newFakeServer("a.example.net")}
		defer n.close()
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:3868")
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)
		n["tcp://a:3868"].freeze()
		suspect := make(chan struct{})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		go func() {
			for c.Peers()[0].State().String() != "SUSPECT" {
				time.Sleep(100 * time.Millisecond)
			}
			close(suspect)
			// A deadline after SUSPECT and before DOWN: the connection
			// is still there.
			time.Sleep(time.Second)
			cancel()
		}()
		_, err = c.Send(ctx, acr(1, "u"))
		require.Error(t, err)
		select {
		case <-suspect:
		default:
			t.Fatalf("never SUSPECT: %v", err)
		}
		assert.NotContains(t, err.Error(), "lost", "its connection was not lost: %v", err)
		assert.ErrorContains(t, err, "after a failover: "+watchdog.ReasonDWATimeout)
	})
}

// ServerStats gives each server its own throttle figures: the scheduler
// knows it by its member's index, which after SetPeers is not its place
// in the configured order.
func TestServerStatsThrottleOfItsServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net")}
		defer n.close()
		cfg := clientConfig(n, Balance, "tcp://a:1", "tcp://b:1")
		cfg.Throttle = &Throttle{}
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		synctest.Wait()
		_, err = c.SetPeers(context.Background(), []PeerSpec{spec(n, "tcp://b:1")})
		require.NoError(t, err)
		synctest.Wait()
		st := c.ServerStats()
		require.Len(t, st, 1)
		require.NotNil(t, st[0].Throttle)
		assert.Equal(t, st[0].Server, st[0].Throttle.Server, "the throttle figures of another server")
	})
}
