package client

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/throttle"
)

// balancerNames are the servers the balancer lists, with their state,
// and its generation.
func balancerNames(t *testing.T, c *Client) ([]string, uint64) {
	t.Helper()
	snap, ok := c.Balancer()
	require.True(t, ok)
	var out []string
	for _, s := range snap.Servers {
		out = append(out, s.Name+":"+s.State.String())
	}
	return out, snap.Generation
}

// A SetPeers refused for a peer's throttle limits leaves the Client as
// it was: the balancer's table and the throttle's servers. It used to
// rebuild the table first and add the new peers to the throttle one by
// one, stopping at the one refused: a peer added before it stayed in the
// throttle, so every later list adding that peer was refused until a
// restart (scenario A), and a peer removed was gone from the balancer
// while the Client still ran it (scenario B).
func TestSetPeersRefusedLimitsChangeNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net"), "tcp://c:1": newFakeServer("c.example.net")}
		defer n.close()
		cfg := clientConfig(n, Balance, "tcp://a:1")
		cfg.Throttle = &Throttle{} // no limit but the peers' own
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)
		a, b, bad := spec(n, "tcp://a:1"), spec(n, "tcp://b:1"), spec(n, "tcp://c:1")
		bad.Throttle = &ThrottleLimits{Accounting: throttle.Limits{MaxRate: 2 * throttle.MaxRate}}

		// Scenario A: b and c added, c's limit refused.
		before, gen := balancerNames(t, c)
		_, err = c.SetPeers(context.Background(), []PeerSpec{a, b, bad})
		require.Error(t, err)
		assert.True(t, errors.Is(err, ErrConfig), "a list the Client cannot take is a configuration error: %v", err)
		assert.ErrorContains(t, err, "peer tcp://c:1", "the peer refused is named")
		after, genAfter := balancerNames(t, c)
		assert.Equal(t, before, after, "the balancer's servers")
		assert.Equal(t, gen, genAfter, "the balancer's table")
		ch, err := c.SetPeers(context.Background(), []PeerSpec{a, b})
		require.NoError(t, err, "b, added after the refusal")
		assert.Equal(t, []string{"b.example.net"}, ch.Added)
		synctest.Wait()

		// Scenario B: a removed and c added, c's limit refused.
		before, gen = balancerNames(t, c)
		_, err = c.SetPeers(context.Background(), []PeerSpec{b, bad})
		require.Error(t, err)
		after, genAfter = balancerNames(t, c)
		assert.Equal(t, before, after, "the balancer's servers")
		assert.Equal(t, gen, genAfter, "the balancer's table")
		require.Len(t, c.Peers(), 2)
		for i := range 20 {
			_, err := c.Send(context.Background(), acr(i, "u"+itoa(i)+"@example.net"))
			require.NoError(t, err)
		}
		assert.NotEmpty(t, n["tcp://a:1"].received(), "a still takes its share")

		c2 := bad
		c2.Throttle = &ThrottleLimits{Accounting: throttle.Limits{MaxRate: throttle.MaxRate}}
		ch, err = c.SetPeers(context.Background(), []PeerSpec{b, c2})
		require.NoError(t, err)
		assert.Equal(t, PeersChange{Added: []string{"c.example.net"}, Removed: []string{"a.example.net"}, Unchanged: []string{"b.example.net"}}, ch)
	})
}
