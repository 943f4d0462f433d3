package client

import (
	"context"
	"crypto/tls"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// spec is the PeerSpec of one of n's fake servers.
func spec(n network, url string) PeerSpec { return PeerSpec{URL: url, Name: n[url].host} }

// A peer added while requests flow is dialed and takes its share; a peer
// removed takes no new request, answers those in flight and closes with
// a DPR. Every request is answered once, none sent twice.
func TestSetPeersUnderTraffic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net"), "tcp://c:1": newFakeServer("c.example.net")}
		defer n.close()
		slow := func(ctx context.Context, p *peer.Peer, req []byte) []byte {
			time.Sleep(50 * time.Millisecond) // requests stay in flight across the change
			return n["tcp://a:1"].handler(ctx, p, req)
		}
		n["tcp://a:1"].handle = slow
		c, err := New(clientConfig(n, Balance, "tcp://a:1", "tcp://b:1"))
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)
		var events []Event
		var emu sync.Mutex
		defer c.Events().Subscribe(func(_ context.Context, e Event) {
			if e.Kind == EventReconfigured {
				emu.Lock()
				events = append(events, e)
				emu.Unlock()
			}
		})()

		const callers, each = 20, 20
		var wg sync.WaitGroup
		errs := make(chan error, callers*each)
		for g := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					id := g*each + i
					_, err := c.Send(context.Background(), acr(id, "user"+itoa(id)+"@example.net"))
					errs <- err
					time.Sleep(10 * time.Millisecond)
				}
			}()
		}
		time.Sleep(100 * time.Millisecond)
		ch, err := c.SetPeers(context.Background(), []PeerSpec{spec(n, "tcp://b:1"), spec(n, "tcp://c:1")})
		require.NoError(t, err)
		assert.Equal(t, PeersChange{Added: []string{"c.example.net"}, Removed: []string{"a.example.net"}, Unchanged: []string{"b.example.net"}}, ch)
		changedAt := time.Now()
		oldA := c.ros.Load().all[0].p()
		v := c.view()
		assert.False(t, v.open[0] || v.takes[0], "the removed peer takes nothing from the change on, while it drains")
		select {
		case <-oldA.Done():
			t.Fatal("the removed peer closed before its requests in flight were answered")
		default:
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err, "nothing lost across the change")
		}
		synctest.Wait()

		seen := map[uint32]int{}
		for url, f := range n {
			for _, s := range f.received() {
				seen[s.e2e]++
				assert.False(t, s.tflag, "nothing replayed")
				if url == "tcp://a:1" {
					assert.False(t, s.at.After(changedAt), "a request reached the removed peer after the change")
				}
			}
		}
		assert.Len(t, seen, callers*each)
		for id, k := range seen {
			require.Equal(t, 1, k, "request %d sent %d times", id, k)
		}
		assert.NotEmpty(t, n["tcp://a:1"].received(), "a had its share before")
		assert.NotEmpty(t, n["tcp://c:1"].received(), "the added peer takes its share")
		select {
		case <-oldA.Done():
		default:
			t.Fatal("the removed peer did not close")
		}
		names := []string{}
		for _, p := range c.Peers() {
			names = append(names, p.Name())
			assert.Equal(t, watchdog.Okay, p.State())
		}
		assert.Equal(t, []string{"b.example.net", "c.example.net"}, names)
		snap, _ := c.Balancer()
		require.Len(t, snap.Servers, 2)
		emu.Lock()
		defer emu.Unlock()
		var got []string
		for _, e := range events {
			got = append(got, e.Server+" "+e.Change)
		}
		assert.ElementsMatch(t, []string{"a.example.net removed", "c.example.net added"}, got)
	})
}

// A weight change keeps the connections and rebuilds the balancer's
// table; a change of another setting replaces the peer: the old one
// closes first, then the new one is dialed (a Diameter server takes one
// connection per peer).
func TestSetPeersReweightsAndReplaces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net")}
		defer n.close()
		sw := newSwitchboard(n)
		cfg := clientConfig(n, Balance, "tcp://a:1", "tcp://b:1")
		cfg.Peer.Dialer = sw.dial
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)

		a, b := spec(n, "tcp://a:1"), spec(n, "tcp://b:1")
		b.Weight = 3
		ch, err := c.SetPeers(context.Background(), []PeerSpec{a, b})
		require.NoError(t, err)
		assert.Equal(t, []string{"b.example.net"}, ch.Reweighted)
		synctest.Wait()
		snap, _ := c.Balancer()
		buckets := map[string]int{}
		for _, s := range snap.Servers {
			buckets[s.Name] = s.Buckets
		}
		assert.Equal(t, map[string]int{"a.example.net": 64, "b.example.net": 192}, buckets)
		assert.Equal(t, map[string]int{"tcp://a:1": 1, "tcp://b:1": 1}, sw.dialed(), "a weight change redials nothing")
		ch, err = c.SetPeers(context.Background(), []PeerSpec{a, b})
		require.NoError(t, err)
		assert.Empty(t, ch.Reweighted, "the new weight is the peer's now")

		oldB := c.Peers()[1]
		b.Tw = 6 * time.Second
		ch, err = c.SetPeers(context.Background(), []PeerSpec{a, b})
		require.NoError(t, err)
		assert.Equal(t, []string{"b.example.net"}, ch.Replaced)
		synctest.Wait()
		select {
		case <-oldB.Done():
		default:
			t.Fatal("the replaced peer is still open")
		}
		newB := c.Peers()[1]
		require.NotSame(t, oldB, newB)
		assert.Equal(t, watchdog.Okay, newB.State())
		assert.Equal(t, 2, sw.dialed()["tcp://b:1"])
		for i := range 40 {
			_, err := c.Send(context.Background(), acr(i, "u"+itoa(i)))
			require.NoError(t, err)
		}
	})
}

// A list SetPeers refuses changes nothing.
func TestSetPeersRefusesAndChangesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net")}
		defer n.close()
		c, err := New(clientConfig(n, Balance, "tcp://a:1"))
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)
		a := spec(n, "tcp://a:1")
		for name, specs := range map[string][]PeerSpec{
			"empty":     nil,
			"duplicate": {a, a},
			"protocol":  {{URL: "radius+tcp://r:1812", Name: "r"}},
			"bad Tw":    {{URL: "tcp://b:1", Name: "b", Tw: -time.Second}},
			// The peer's Dial would refuse it, after the old a had drained.
			"Tw below the minimum": {{URL: "tcp://a:1", Name: "a.example.net", Tw: 4 * time.Second}},
		} {
			_, err := c.SetPeers(context.Background(), specs)
			assert.Error(t, err, name)
		}
		require.Len(t, c.Peers(), 1)
		require.NotNil(t, c.Peers()[0], "a was replaced by a peer that could not be dialed")
		assert.Equal(t, "a.example.net", c.Peers()[0].Name())
		_, err = c.Send(context.Background(), acr(1, "u"))
		require.NoError(t, err)
	})
}

// The members a Client has over its life are bounded: past the bound,
// SetPeers asks for a restart and changes nothing.
func TestSetPeersBounded(t *testing.T) {
	defer func(n int) { maxMembers = n }(maxMembers)
	maxMembers = 2
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net")}
		defer n.close()
		c, err := New(clientConfig(n, Balance, "tcp://a:1"))
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)
		a, b := spec(n, "tcp://a:1"), spec(n, "tcp://b:1")
		_, err = c.SetPeers(context.Background(), []PeerSpec{a, b})
		require.NoError(t, err)
		synctest.Wait()
		_, err = c.SetPeers(context.Background(), []PeerSpec{a})
		require.NoError(t, err)
		synctest.Wait()
		_, err = c.SetPeers(context.Background(), []PeerSpec{a, b})
		require.ErrorContains(t, err, "restart")
		require.Len(t, c.Peers(), 1)
		_, err = c.Send(context.Background(), acr(1, "u"))
		require.NoError(t, err)
	})
}

// In primary/secondary mode the new order is the new preference: a
// reload that swaps the two sends the next requests to the new primary.
// With MaxConnections, a peer added waits for a slot, and gets the one a
// removed peer frees once it has drained.
func TestSetPeersPrimarySecondary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net"), "tcp://c:1": newFakeServer("c.example.net")}
		defer n.close()
		c, err := New(clientConfig(n, PrimarySecondary, "tcp://a:1", "tcp://b:1"))
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)
		host := func(i int) string {
			ans, err := c.Send(context.Background(), acr(i, "u"))
			require.NoError(t, err)
			h, _ := message.StringOf(ans, message.OriginHost, 0)
			return h
		}
		assert.Equal(t, "a.example.net", host(1))
		_, err = c.SetPeers(context.Background(), []PeerSpec{spec(n, "tcp://b:1"), spec(n, "tcp://a:1")})
		require.NoError(t, err)
		assert.Equal(t, "b.example.net", host(2), "b is the primary now")

		cfg := clientConfig(n, PrimarySecondary, "tcp://a:1", "tcp://b:1")
		cfg.MaxConnections = 1
		lim, err := New(cfg)
		require.NoError(t, err)
		defer lim.Close(context.Background())
		synctest.Wait()
		ch, err := lim.SetPeers(context.Background(), []PeerSpec{spec(n, "tcp://b:1"), spec(n, "tcp://c:1")})
		require.NoError(t, err)
		assert.Equal(t, []string{"a.example.net"}, ch.Removed)
		synctest.Wait()
		dialed := 0
		for _, p := range lim.Peers() {
			if p != nil {
				dialed++
				assert.Equal(t, "b.example.net", p.Name(), "the slot a freed goes to the first in order")
			}
		}
		assert.Equal(t, 1, dialed, "one connection, as MaxConnections says")
		ans, err := lim.Send(context.Background(), acr(3, "u"))
		require.NoError(t, err)
		h, _ := message.StringOf(ans, message.OriginHost, 0)
		assert.Equal(t, "b.example.net", h)
	})
}

// A request naming a replaced peer in Destination-Host while the old peer
// drains and the new one is not dialed yet still names one of the
// configured peers: it waits for the replacement, and goes nowhere else
// (RFC 6733 6.1.5).
func TestSetPeersReplacedKeepsDestinationHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net")}
		defer n.close()
		n["tcp://a:1"].handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte {
			time.Sleep(10 * time.Second) // the old peer drains for 10 s
			return n["tcp://a:1"].handler(ctx, p, req)
		}
		c, err := New(clientConfig(n, Balance, "tcp://a:1", "tcp://b:1"))
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)

		inFlight := make(chan error, 1)
		go func() {
			_, err := c.Send(context.Background(), acrTo(1, "u1", "a.example.net"))
			inFlight <- err
		}()
		time.Sleep(time.Second)
		a, b := spec(n, "tcp://a:1"), spec(n, "tcp://b:1")
		a.Tw = 20 * time.Second
		ch, err := c.SetPeers(context.Background(), []PeerSpec{a, b})
		require.NoError(t, err)
		require.Equal(t, []string{"a.example.net"}, ch.Replaced)
		synctest.Wait()
		require.Nil(t, c.Peers()[0], "the replacement waits for the old peer's drain")

		ans, err := c.Send(context.Background(), acrTo(2, "u2", "a.example.net"))
		require.NoError(t, err)
		rc, _ := message.ResultCodeOf(ans)
		assert.EqualValues(t, message.Success, rc)
		require.NoError(t, <-inFlight)
		assert.Empty(t, n["tcp://b:1"].received(), "a request for a.example.net reached b")
		assert.Len(t, n["tcp://a:1"].received(), 2)
	})
}

// A name added back is named in Destination-Host by the identity it had
// before its new peer has learned it again (its CEA): a request for it
// waits for that peer, and goes nowhere else.
func TestSetPeersAddedBackKeepsDestinationHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net")}
		defer n.close()
		c, err := New(clientConfig(n, Balance, "tcp://a:1", "tcp://b:1"))
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)
		a, b := spec(n, "tcp://a:1"), spec(n, "tcp://b:1")
		_, err = c.SetPeers(context.Background(), []PeerSpec{b})
		require.NoError(t, err)
		synctest.Wait()

		n["tcp://a:1"].freeze() // the new peer's CER waits
		_, err = c.SetPeers(context.Background(), []PeerSpec{a, b})
		require.NoError(t, err)
		synctest.Wait()
		require.Equal(t, "tcp://a:1", c.Peers()[0].Name(), "no CEA yet")
		time.AfterFunc(2*time.Second, n["tcp://a:1"].unfreeze)
		ans, err := c.Send(context.Background(), acrTo(1, "u1", "a.example.net"))
		require.NoError(t, err)
		rc, _ := message.ResultCodeOf(ans)
		assert.EqualValues(t, message.Success, rc)
		assert.Empty(t, n["tcp://b:1"].received(), "a request for a.example.net reached b")
		assert.Len(t, n["tcp://a:1"].received(), 1)
	})
}

// Specs differ in their TLS settings when they hold other *tls.Configs,
// not when they hold the same one: two configurations from the same files
// never compare equal by value (their CA pools hold functions).
func TestSameSettingsTLSByIdentity(t *testing.T) {
	a, b := &tls.Config{ServerName: "x"}, &tls.Config{ServerName: "x"}
	s := PeerSpec{URL: "tls://x:1", Name: "x", TLS: a}
	same := s
	same.Weight = 3
	assert.True(t, sameSettings(s, same), "the same *tls.Config, another weight")
	other := s
	other.TLS = b
	assert.False(t, sameSettings(s, other), "another *tls.Config")
}

// A Diameter server takes one connection per peer: a name added back
// while its old peer still drains, or replaced twice before its first
// replacement was dialed, is dialed once the old connection has closed,
// and only the latest member of the name is.
func TestSetPeersOneConnectionPerName(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps func(a, b PeerSpec) [][]PeerSpec
	}{
		{"added back while draining", func(a, b PeerSpec) [][]PeerSpec {
			return [][]PeerSpec{{a}, {a, b}}
		}},
		{"replaced twice", func(a, b PeerSpec) [][]PeerSpec {
			b1, b2 := b, b
			b1.Tw, b2.Tw = 6*time.Second, 7*time.Second
			return [][]PeerSpec{{a, b1}, {a, b2}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net")}
				defer n.close()
				gate := make(chan struct{})
				b := n["tcp://b:1"]
				b.handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte {
					<-gate
					return b.handler(ctx, p, req)
				}
				sw := newSwitchboard(n)
				cfg := clientConfig(n, Balance, "tcp://a:1", "tcp://b:1")
				cfg.Peer.Dialer = sw.dial
				c, err := New(cfg)
				require.NoError(t, err)
				defer c.Close(context.Background())
				waitOkay(t, c)
				oldB := c.Peers()[1]

				done := make(chan error, 1)
				go func() {
					req := message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
						String(message.SessionID, 0, true, "client.example.net;1;pinned").
						String(message.OriginHost, 0, true, "client.example.net").
						String(message.OriginRealm, 0, true, "example.net").
						String(message.DestinationRealm, 0, true, "example.net").
						String(message.DestinationHost, 0, true, "b.example.net").
						Uint32(message.AccountingRecordType, 0, true, 2).
						Uint32(message.AccountingRecordNumber, 0, true, 1).Bytes()
					_, err := c.Send(context.Background(), req)
					done <- err
				}()
				synctest.Wait() // in flight on b, which holds it
				for _, list := range tc.steps(spec(n, "tcp://a:1"), spec(n, "tcp://b:1")) {
					_, err := c.SetPeers(context.Background(), list)
					require.NoError(t, err)
					synctest.Wait()
				}
				select {
				case <-oldB.Done():
					t.Fatal("the old peer closed with its request in flight")
				default:
				}
				assert.Equal(t, 1, sw.dialed()["tcp://b:1"], "b is not dialed again while its old connection drains")

				close(gate) // the old connection answers, sends its DPR and closes
				require.NoError(t, <-done)
				<-oldB.Done()
				synctest.Wait()
				assert.Equal(t, 2, sw.dialed()["tcp://b:1"], "then the latest member of the name alone is dialed")
				waitOkay(t, c)
				for _, p := range c.Peers() {
					assert.Equal(t, watchdog.Okay, p.State(), p.Name())
				}
			})
		})
	}
}

// With MaxConnections, a replaced peer keeps its slot while its old
// connection drains: the secondary is not dialed in its place, and the
// primary's replacement is once the old connection has closed.
func TestSetPeersReplacedPrimaryKeepsItsSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://c:1": newFakeServer("c.example.net")}
		defer n.close()
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:1", "tcp://c:1")
		cfg.MaxConnections = 1
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		synctest.Wait()
		a := spec(n, "tcp://a:1")
		a.Tw = 7 * time.Second
		_, err = c.SetPeers(context.Background(), []PeerSpec{a, spec(n, "tcp://c:1")})
		require.NoError(t, err)
		time.Sleep(time.Minute)
		synctest.Wait()
		require.NotNil(t, c.Peers()[0], "the replaced primary is dialed")
		assert.Equal(t, watchdog.Okay, c.Peers()[0].State())
		assert.Nil(t, c.Peers()[1], "the secondary is not")
	})
}

// A peer SetPeers removed drains gracefully. A Close that gives it time
// (Close(context.Background())) leaves that drain alone: its request in
// flight is answered, as the requests in flight on the configured peers
// are, not failed as the Client closes. A Close with a short ctx ends it
// within that ctx, as it ends the others.
func TestCloseLetsRemovedPeerDrain(t *testing.T) {
	for _, short := range []bool{false, true} {
		t.Run(map[bool]string{false: "graceful", true: "short"}[short], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net")}
				defer n.close()
				n["tcp://a:1"].handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte {
					time.Sleep(2 * time.Second)
					return n["tcp://a:1"].handler(ctx, p, req)
				}
				c, err := New(clientConfig(n, PrimarySecondary, "tcp://a:1", "tcp://b:1"))
				require.NoError(t, err)
				waitOkay(t, c)
				res := make(chan error, 1)
				go func() {
					_, err := c.Send(context.Background(), acr(1, "u"))
					res <- err
				}()
				synctest.Wait()
				_, err = c.SetPeers(context.Background(), []PeerSpec{{URL: "tcp://b:1", Name: "b.example.net"}})
				require.NoError(t, err)
				synctest.Wait()
				ctx, cancel := context.WithCancel(context.Background())
				if short {
					ctx, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
				}
				defer cancel()
				start := time.Now()
				c.Close(ctx)
				if !short {
					assert.NoError(t, <-res, "the request in flight on the removed peer")
					return
				}
				assert.LessOrEqual(t, time.Since(start), 100*time.Millisecond)
				assert.ErrorIs(t, <-res, ErrClosed)
			})
		})
	}
}
