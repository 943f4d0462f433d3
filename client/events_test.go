package client

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/watchdog"
)

type eventLog struct {
	mu  sync.Mutex
	evs []Event
}

func (l *eventLog) add(_ context.Context, e Event) {
	l.mu.Lock()
	l.evs = append(l.evs, e)
	l.mu.Unlock()
}

func (l *eventLog) ofKind(k EventKind) []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Event
	for _, e := range l.evs {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// A frozen server in Balance mode: the Client's bus carries its peers'
// events under the servers' configured names, the balancer's rebuilds
// with their generation, and a failover record with its outcome, each in
// its own kind with its fields set.
func TestEventsAreTyped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net")}
		defer n.close()
		cfg := clientConfig(n, Balance, "tcp://a:1", "tcp://b:1")
		cfg.Peers[0].Name, cfg.Peers[1].Name = "alpha", "beta"
		var log eventLog
		cfg.Events = NewBus()
		defer cfg.Events.Subscribe(log.add)()
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)
		synctest.Wait() // the bus delivers on its own goroutine
		gen0 := log.ofKind(EventBalancerRebuilt)
		require.NotEmpty(t, gen0, "two servers came into service")
		snap, ok := c.Balancer()
		require.True(t, ok)
		assert.Equal(t, gen0[len(gen0)-1].Generation, snap.Generation)
		require.Len(t, snap.Servers, 2)
		assert.Equal(t, "alpha", snap.Servers[0].Name)
		assert.Equal(t, 256, snap.Servers[0].Buckets+snap.Servers[1].Buckets, "every bucket owned")
		snap.Servers[0].State = loadbalance.Down // the copy is the caller's
		again, _ := c.Balancer()
		assert.Equal(t, loadbalance.InService, again.Servers[0].State)

		n["tcp://a:1"].freeze()
		done := make(chan error, 1)
		go func() { // pending on alpha when it is declared SUSPECT
			_, err := c.Send(context.Background(), acrFor(t, c, "alpha"))
			done <- err
		}()
		time.Sleep(2*30*time.Second + time.Second)
		synctest.Wait()
		require.NoError(t, <-done)

		var alphaWD []peer.Event
		for _, e := range log.ofKind(EventPeer) {
			require.NotNil(t, e.Peer)
			assert.Contains(t, []string{"alpha", "beta"}, e.Server, "the configured name")
			if e.Server == "alpha" && e.Peer.Kind == peer.EventWatchdog {
				alphaWD = append(alphaWD, *e.Peer)
			}
		}
		require.GreaterOrEqual(t, len(alphaWD), 2)
		last := alphaWD[len(alphaWD)-1]
		assert.Equal(t, watchdog.Okay, last.From)
		assert.Equal(t, watchdog.Suspect, last.To)

		fo := log.ofKind(EventFailover)
		require.Len(t, fo, 1)
		require.NotNil(t, fo[0].Failover)
		assert.Equal(t, "alpha", fo[0].Server)
		assert.Equal(t, Moved, fo[0].Failover.Outcome)
		assert.Equal(t, "beta", fo[0].Failover.To)
		assert.Equal(t, 1, fo[0].Failover.Moved)

		assert.Len(t, log.ofKind(EventBalancerRebuilt), len(gen0), "a suspension keeps the table")
		time.Sleep(30 * time.Second) // SUSPECT -> DOWN
		synctest.Wait()
		rb := log.ofKind(EventBalancerRebuilt)
		require.Len(t, rb, len(gen0)+1, "alpha's DOWN rebuilt the table")
		assert.Equal(t, "alpha", rb[len(rb)-1].Server)
		assert.Greater(t, rb[len(rb)-1].Generation, gen0[len(gen0)-1].Generation)
		assert.Equal(t, uint64(len(rb)), cfg.Events.Count(EventBalancerRebuilt))
		assert.Empty(t, log.ofKind(EventSlotFilled), "no MaxConnections")
		n["tcp://a:1"].unfreeze()
	})
}

// acrFor returns an accounting request the balancer sends to server.
func acrFor(t *testing.T, c *Client, server string) []byte {
	t.Helper()
	for i := range 1000 {
		nai := "u" + itoa(i) + "@example.net"
		if s, err := c.bal.Pick(loadbalance.Request{NAI: nai}); err == nil && s.Name == server {
			return acr(i, nai)
		}
	}
	t.Fatalf("no NAI goes to %s", server)
	return nil
}

// Servers changing state at once (each peer's events come on its own
// goroutine): the balancer's rebuild events are published in the order
// of their generations, each with its own, none twice or lost.
func TestRebuildEventsInGenerationOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const servers, toggles = 8, 25
		n := network{}
		var urls []string
		for i := range servers {
			u := "tcp://s" + itoa(i) + ":1"
			n[u] = newFakeServer("s" + itoa(i) + ".example.net")
			urls = append(urls, u)
		}
		defer n.close()
		cfg := clientConfig(n, Balance, urls...)
		cfg.Events = NewBus()
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)
		snap, _ := c.Balancer()
		from := snap.Generation

		var log eventLog
		defer cfg.Events.Subscribe(log.add)()
		var wg sync.WaitGroup
		for _, m := range c.ros.Load().all {
			wg.Go(func() {
				for range toggles {
					c.serverState(m, watchdog.Down)
					c.serverState(m, watchdog.Okay)
				}
			})
		}
		wg.Wait()
		synctest.Wait() // delivered off the goroutines that changed the states
		rb := log.ofKind(EventBalancerRebuilt)
		require.Len(t, rb, 2*servers*toggles, "every toggle rebuilds the table")
		for i, e := range rb {
			require.Equal(t, from+uint64(i)+1, e.Generation, "event %d of %d (server %s)", i, len(rb), e.Server)
		}
		snap, _ = c.Balancer()
		assert.Equal(t, rb[len(rb)-1].Generation, snap.Generation)
	})
}

// A subscriber that changes a server's state on the goroutine delivering a
// rebuild event does not deadlock; its rebuild is delivered right after,
// to every subscriber (a second one sees the two in that order).
func TestRebuildEventFromASubscriber(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, cfg := twoServersInBalance(t)
		a, b := c.ros.Load().all[0], c.ros.Load().all[1]
		var log eventLog
		once := sync.Once{}
		defer cfg.Events.Subscribe(func(ctx context.Context, e Event) {
			log.add(ctx, e)
			if e.Kind == EventBalancerRebuilt && e.Server == a.spec.Name {
				once.Do(func() { c.serverState(b, watchdog.Down) })
			}
		})()
		var second eventLog
		defer cfg.Events.Subscribe(second.add)()
		c.serverState(a, watchdog.Down)
		synctest.Wait()
		for _, l := range []*eventLog{&log, &second} {
			rb := l.ofKind(EventBalancerRebuilt)
			require.Len(t, rb, 2)
			assert.Equal(t, a.spec.Name, rb[0].Server)
			assert.Equal(t, b.spec.Name, rb[1].Server)
			assert.Equal(t, rb[0].Generation+1, rb[1].Generation)
		}
	})
}

// A subscriber that blocks (which Bus forbids) while servers keep changing
// state: the events queue up to maxQueuedEvents, then are dropped and
// counted (EventsDropped); once the subscriber returns, the queued ones
// follow in order, each generation once; nothing ran on the goroutines
// that changed the states.
func TestRebuildEventsPastABlockedSubscriber(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, cfg := twoServersInBalance(t)
		a, b := c.ros.Load().all[0], c.ros.Load().all[1]
		release := make(chan struct{})
		var log eventLog
		var blocked sync.Once
		defer cfg.Events.Subscribe(func(ctx context.Context, e Event) {
			if e.Kind != EventBalancerRebuilt {
				return
			}
			log.add(ctx, e)
			if e.Server == a.spec.Name {
				blocked.Do(func() { <-release })
			}
		})()
		c.serverState(a, watchdog.Down) // its delivery blocks
		synctest.Wait()
		const extra = 100
		toggles := (maxQueuedEvents + extra) / 2
		for range toggles {
			c.serverState(b, watchdog.Down)
			c.serverState(b, watchdog.Okay)
		}
		assert.Equal(t, uint64(2*toggles-maxQueuedEvents), c.EventsDropped(), "past the bound, dropped and counted")
		assert.Len(t, log.ofKind(EventBalancerRebuilt), 1, "nothing delivered on the changing goroutine")
		close(release)
		synctest.Wait()
		rb := log.ofKind(EventBalancerRebuilt)
		require.Len(t, rb, 1+maxQueuedEvents)
		for i := 1; i < len(rb); i++ {
			assert.Equal(t, rb[i-1].Generation+1, rb[i].Generation, "event %d in order", i)
		}
	})
}

// A subscriber that ends the delivering goroutine (runtime.Goexit, as
// t.FailNow does) does not leave the events stuck: the ones after it
// are delivered, in order, once each.
func TestRebuildEventsAfterADeliveryEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, cfg := twoServersInBalance(t)
		a, b := c.ros.Load().all[0], c.ros.Load().all[1]
		var log eventLog
		var mu sync.Mutex
		calls := 0
		defer cfg.Events.Subscribe(func(ctx context.Context, e Event) {
			if e.Kind != EventBalancerRebuilt {
				return
			}
			log.add(ctx, e)
			mu.Lock()
			calls++
			k := calls
			mu.Unlock()
			if k == 2 {
				runtime.Goexit() // on b's first rebuild: the delivery is gone
			}
		})()
		c.serverState(a, watchdog.Down)
		c.serverState(b, watchdog.Down)
		c.serverState(b, watchdog.Okay)
		c.serverState(a, watchdog.Okay)
		synctest.Wait()
		rb := log.ofKind(EventBalancerRebuilt)
		require.Len(t, rb, 4)
		for i := 1; i < len(rb); i++ {
			assert.Equal(t, rb[i-1].Generation+1, rb[i].Generation, "event %d", i)
		}
	})
}

// twoServersInBalance returns a Client in Balance mode with a bus, both of
// its servers OKAY; it and the servers are closed when the test ends.
func twoServersInBalance(t *testing.T) (*Client, Config) {
	t.Helper()
	n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net")}
	t.Cleanup(n.close)
	cfg := clientConfig(n, Balance, "tcp://a:1", "tcp://b:1")
	cfg.Events = NewBus()
	c, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close(context.Background()) })
	waitOkay(t, c)
	return c, cfg
}

// serverState gives the balancer m's state as refresh does when m's peer
// changes state, and schedules the rebuild the same way: the tests above
// drive the ordering of rebuild events without real state changes.
func (c *Client) serverState(m *member, st watchdog.State) {
	c.avMu.Lock()
	if e, ok := c.setBalancerStateLocked(m, balancerState(st)); ok {
		c.note(e)
	}
	c.avMu.Unlock()
}
