package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radpeer"
)

// SetPeers checks the URLs as New does, before changing anything: a URL
// no peer can be dialed at is a configuration error, and the peers stay.
// A RADIUS URL that does not parse is named as RADIUS's.
func TestSetPeersChecksURLs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net")}
		defer n.close()
		c, err := New(clientConfig(n, Balance, "tcp://a:1"))
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)
		for _, u := range []string{"bogus://x", "tcp://", "tcp://:3868", "tcp://a"} {
			ch, err := c.SetPeers(context.Background(), []PeerSpec{{URL: u}})
			assert.ErrorIs(t, err, ErrConfig, "SetPeers(%s)", u)
			assert.Empty(t, ch.Removed, "SetPeers(%s) removed a peer", u)
			cfg := clientConfig(n, Balance, "tcp://a:1")
			cfg.Peers = []PeerSpec{{URL: u}}
			_, err = New(cfg)
			assert.ErrorIs(t, err, ErrConfig, "New(%s)", u)
		}
		assert.Len(t, c.ServerStats(), 1)
	})
	_, err := New(Config{Peers: []PeerSpec{{URL: "radius+tcp://127.0.0.1", Secret: []byte("s")}}})
	if assert.ErrorIs(t, err, ErrConfig) {
		assert.Contains(t, err.Error(), "missing port", "a RADIUS URL without its port read as a Diameter one")
	}
}

// After Close, SetPeers and WaitReady fail at once with ErrClosed, as
// Send does; Exchange of a nil request is an error, not a panic.
func TestCallsAfterCloseAndNil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net")}
		defer n.close()
		c, err := New(clientConfig(n, Balance, "tcp://a:1"))
		require.NoError(t, err)
		waitOkay(t, c)
		require.NoError(t, c.Close(context.Background()))
		_, err = c.SetPeers(context.Background(), []PeerSpec{{URL: "tcp://a:1"}})
		assert.ErrorIs(t, err, ErrClosed)
		assert.ErrorIs(t, err, peer.ErrClosed)
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err = c.WaitReady(ctx, 1)
		assert.ErrorIs(t, err, ErrClosed)
		assert.Less(t, time.Since(start), time.Second, "WaitReady on a closed Client waited for its context")
		_, err = c.Send(context.Background(), acr(1, "u"))
		assert.ErrorIs(t, err, ErrClosed)
	})
	_, c, stop := radOne(t)
	defer stop()
	_, err := c.Exchange(context.Background(), nil)
	if assert.Error(t, err) {
		assert.True(t, strings.Contains(err.Error(), "nil request"), err.Error())
	}
	assert.True(t, errors.Is(radpeer.ErrTimeout, ErrTimeout) && errors.Is(radpeer.ErrClosed, ErrClosed), "one error vocabulary")
}

// A request whose caller cancels it did not time out: its error matches
// context.Canceled and not ErrTimeout, and the statistics count it as
// canceled.
func TestCanceledIsNoTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net")}
		defer n.close()
		c, err := New(clientConfig(n, Balance, "tcp://a:1"))
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)
		n["tcp://a:1"].freeze()
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Second, cancel)
		_, err = c.Send(ctx, acr(1, "u"))
		assert.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, ErrTimeout, "the caller gave up: no deadline passed")
		st := c.ServerStats()[0]
		assert.Equal(t, uint64(1), st.Errors["canceled"], "errors %v", st.Errors)
		assert.Zero(t, st.Errors["timeout"])
		n["tcp://a:1"].unfreeze()
	})
}

// Close returns its context's error when the context ended before every
// peer's DPR/DPA did (a frozen server sends no DPA), and nil when it did
// not.
func TestCloseReturnsContextError(t *testing.T) {
	for _, frozen := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			n := network{"tcp://a:1": newFakeServer("a.example.net")}
			defer n.close()
			c, err := New(clientConfig(n, Balance, "tcp://a:1"))
			require.NoError(t, err)
			waitOkay(t, c)
			if frozen {
				n["tcp://a:1"].freeze()
				defer n["tcp://a:1"].unfreeze()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			err = c.Close(ctx)
			if frozen {
				assert.ErrorIs(t, err, context.DeadlineExceeded, "no DPA before ctx ended")
			} else {
				assert.NoError(t, err)
			}
			<-c.Done()
		})
	}
}
