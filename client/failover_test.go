package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

func waitOkay(t *testing.T, c *Client) {
	t.Helper()
	synctest.Wait()
	for _, p := range c.Peers() {
		require.Equal(t, watchdog.Okay, p.State(), p.Name())
	}
}

// A server that stops answering everything: its pending requests move to
// the secondary when the watchdog declares it SUSPECT (2Tw), in their
// original order, with the T flag and their End-to-End ids (F2); a late
// answer from the thawed primary is not delivered twice (F4).
func TestFailoverReplaysPendingInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:3868": newFakeServer("a.example.net"), "tcp://b:3868": newFakeServer("b.example.net")}
		defer n.close()
		c, err := New(clientConfig(n, PrimarySecondary, "tcp://a:3868", "tcp://b:3868"))
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)

		n["tcp://a:3868"].freeze()
		const N = 20
		type res struct {
			i   int
			e2e uint32
			ans []byte
			err error
		}
		results := make(chan res, N)
		var sentIDs [N]uint32
		for i := range N {
			req := acr(i, "user@example.net")
			wire.SetEndToEnd(req, uint32(1000+i))
			sentIDs[i] = uint32(1000 + i)
			go func() {
				ans, err := c.Send(context.Background(), req)
				results <- res{i, uint32(1000 + i), ans, err}
			}()
			time.Sleep(time.Millisecond) // a definite send order
		}
		start := time.Now()
		synctest.Wait()
		assert.Empty(t, n["tcp://b:3868"].received(), "nothing moves before SUSPECT")

		for range N {
			r := <-results
			require.NoError(t, r.err, "request %d", r.i)
			assert.Equal(t, r.e2e, wire.EndToEnd(r.ans), "answer to the same End-to-End id")
			host, _ := message.StringOf(r.ans, message.OriginHost, 0)
			assert.Equal(t, "b.example.net", host)
		}
		detect := time.Since(start)
		assert.InDelta(t, float64(60*time.Second), float64(detect), float64(100*time.Millisecond), "failover at 2Tw on an idle link")

		got := n["tcp://b:3868"].received()
		require.Len(t, got, N)
		for i, s := range got {
			assert.Equal(t, sentIDs[i], s.e2e, "original send order")
			assert.True(t, s.tflag, "replays carry the T flag")
		}
		synctest.Wait() // the record follows the hand-over (see FailoverLog)
		recs, total := c.FailoverLog()
		require.Equal(t, uint64(1), total)
		assert.Equal(t, "a.example.net", recs[0].From)
		assert.Equal(t, "b.example.net", recs[0].To)
		assert.Equal(t, N, recs[0].Moved)
		assert.Equal(t, sentIDs[:], recs[0].EndToEnd)

		// The primary thaws while still SUSPECT: it answers the old
		// requests on the old connection; callers already have answers.
		n["tcp://a:3868"].unfreeze()
		synctest.Wait()
		pa := c.Peers()[0]
		assert.Equal(t, uint64(N), pa.Stats().Late, "late answers counted, not delivered")
		assert.Equal(t, watchdog.Okay, pa.State(), "failback on the primary's answers")

		// Failback: new requests go to the primary again.
		ans, err := c.Send(context.Background(), acr(99, "user@example.net"))
		require.NoError(t, err)
		host, _ := message.StringOf(ans, message.OriginHost, 0)
		assert.Equal(t, "a.example.net", host)

		st := c.ServerStats()
		assert.Equal(t, uint64(N), st[0].FailedOver)
		assert.Equal(t, uint64(N+1), st[0].Sent)
		assert.Equal(t, uint64(N+1), st[0].Answered, "answered after failover count for the first server")
		assert.Zero(t, st[1].Sent, "replays are not first sends")
		assert.InDelta(t, 60e6, st[1].MeanUs, 0.2e6, "the latency of the replays' answers counts for the server that gave them")
		assert.Less(t, st[0].P99Us, 1e3, "the primary answered one request, at once")
	})
}

// With no alternate in service, moved requests wait until a peer comes up
// (F3): here the only server is restarted unfrozen and the requests are
// answered after its reopen; one with a short deadline fails clearly.
func TestNoAlternateRequestsWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFakeServer("a.example.net")
		n := network{"tcp://a:3868": srv}
		defer n.close()
		c, err := New(clientConfig(n, PrimarySecondary, "tcp://a:3868"))
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)

		srv.freeze()
		long := make(chan error, 1)
		short := make(chan error, 1)
		go func() {
			_, err := c.Send(context.Background(), acr(1, "u@example.net"))
			long <- err
		}()
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 70*time.Second)
			defer cancel()
			_, err := c.Send(ctx, acr(2, "u@example.net"))
			short <- err
		}()
		synctest.Wait()
		// SUSPECT at 60 s: both are parked; the short one's deadline passes.
		err = <-short
		require.Error(t, err)
		assert.ErrorIs(t, err, peer.ErrTimeout)

		// DOWN at 90 s; the server comes back unfrozen for the reconnect.
		time.Sleep(25 * time.Second)
		srv.unfreeze()
		require.NoError(t, <-long, "the parked request was answered after the reopen")
		assert.Equal(t, watchdog.Okay, c.Peers()[0].State())
	})
}

// A request addressed to the failed peer by Destination-Host is not moved:
// it fails as DIAMETER_UNABLE_TO_DELIVER (RFC 6733 5.5.4). One sent while
// its host is down waits for it and never goes to another host. Both hold
// behind a throttle too, whose queue may send a request to any server in
// service but never a pinned one elsewhere.
func TestDestinationHostNotMoved(t *testing.T) {
	pinned := message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
		String(message.SessionID, 0, true, "s;1").
		String(message.DestinationHost, 0, true, "a.example.net").Bytes()
	for _, throttled := range []bool{false, true} {
		for _, whenDown := range []bool{false, true} {
			name := map[bool]string{false: "pending when its host fails", true: "sent while its host is down"}[whenDown]
			if throttled {
				name += ", throttled"
			}
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					n := network{"tcp://a:3868": newFakeServer("a.example.net"), "tcp://b:3868": newFakeServer("b.example.net")}
					defer n.close()
					cfg := clientConfig(n, PrimarySecondary, "tcp://a:3868", "tcp://b:3868")
					if throttled {
						cfg.Throttle = &Throttle{}
					}
					c, err := New(cfg)
					require.NoError(t, err)
					defer c.Close(context.Background())
					waitOkay(t, c)
					n["tcp://a:3868"].freeze()
					ctx := context.Background()
					if whenDown {
						time.Sleep(time.Minute) // a is DOWN, its redials frozen too
						synctest.Wait()
						require.NotEqual(t, watchdog.Okay, c.Peers()[0].State())
						var cancel context.CancelFunc
						ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
						defer cancel()
					}
					_, err = c.Send(ctx, slices.Clone(pinned))
					require.Error(t, err)
					if !whenDown {
						assert.True(t, errors.Is(err, ErrUnableToDeliver), err.Error())
					}
					assert.Empty(t, n["tcp://b:3868"].received(), "sent to b: %v", err)
				})
			})
		}
	}
}

// Balance mode spreads conversations over the peers in service, one NAI
// always to one server, and moves everything off a failed server.
func TestBalanceModeAndFailover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net"), "tcp://c:1": newFakeServer("c.example.net")}
		defer n.close()
		c, err := New(clientConfig(n, Balance, "tcp://a:1", "tcp://b:1", "tcp://c:1"))
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)

		where := map[string]string{}
		for i := range 300 {
			nai := "user" + itoa(i%60) + "@example.net"
			ans, err := c.Send(context.Background(), acr(i, nai))
			require.NoError(t, err)
			host, _ := message.StringOf(ans, message.OriginHost, 0)
			if prev, ok := where[nai]; ok {
				require.Equal(t, prev, host, "one NAI, one server")
			}
			where[nai] = host
		}
		count := map[string]int{}
		for _, h := range where {
			count[h]++
		}
		assert.Len(t, count, 3, "all servers used")

		n["tcp://b:1"].freeze()
		var wg sync.WaitGroup
		errs := make(chan error, 60)
		for i := range 60 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := c.Send(context.Background(), acr(1000+i, "user"+itoa(i)+"@example.net"))
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		for _, s := range n["tcp://b:1"].received() {
			assert.False(t, s.tflag)
		}
		moved := 0
		for _, srv := range []string{"tcp://a:1", "tcp://c:1"} {
			for _, s := range n[srv].received() {
				if s.tflag {
					moved++
				}
			}
		}
		assert.Greater(t, moved, 0, "b's share was replayed elsewhere")
		n["tcp://b:1"].unfreeze()
	})
}

// F5: with MaxConnections 2 over three ordered peers, only the first two
// are connected; when the primary goes DOWN the third fills its slot; when
// the primary is back, the least preferred connection is closed, but only
// after it has worked for five minutes.
func TestPrimarySecondaryConnectionLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, cc := newFakeServer("a.example.net"), newFakeServer("b.example.net"), newFakeServer("c.example.net")
		n := network{"tcp://a:1": a, "tcp://b:1": b, "tcp://c:1": cc}
		defer n.close()
		sw := newSwitchboard(n)
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:1", "tcp://b:1", "tcp://c:1")
		cfg.MaxConnections = 2
		var log eventLog
		cfg.Events = NewBus()
		defer cfg.Events.Subscribe(log.add)()
		cfg.Peer.Dialer = sw.dial
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		synctest.Wait()
		assert.Equal(t, map[string]int{"tcp://a:1": 1, "tcp://b:1": 1}, sw.dialed(), "only two connections")
		_, ok := c.Balancer()
		assert.False(t, ok, "no balancer in primary/secondary mode")

		// The primary dies: its server closes and refuses new connections.
		sw.setDown("tcp://a:1", true)
		a.dropConnections()
		synctest.Wait()
		require.Equal(t, watchdog.Down, c.Peers()[0].State())
		require.NotNil(t, c.Peers()[2], "the third peer fills the slot")
		assert.Equal(t, watchdog.Okay, c.Peers()[2].State())
		filled := log.ofKind(EventSlotFilled)
		require.Len(t, filled, 1)
		assert.Equal(t, "c.example.net", filled[0].Server)
		assert.Equal(t, "a.example.net", filled[0].Because)
		ans, err := c.Send(context.Background(), acr(1, "u@example.net"))
		require.NoError(t, err)
		host, _ := message.StringOf(ans, message.OriginHost, 0)
		assert.Equal(t, "b.example.net", host, "the secondary is promoted")

		// The primary comes back on a later retry (once per Tw).
		sw.setDown("tcp://a:1", false)
		time.Sleep(31 * time.Second)
		synctest.Wait()
		require.Equal(t, watchdog.Reopen, c.Peers()[0].State())
		time.Sleep(61 * time.Second) // three DWR/DWA exchanges
		synctest.Wait()
		require.Equal(t, watchdog.Okay, c.Peers()[0].State())
		require.NotNil(t, c.Peers()[2], "c has worked for under 5 minutes: kept")

		time.Sleep(5 * time.Minute)
		synctest.Wait()
		assert.Nil(t, c.Peers()[2], "closed once it had worked 5 minutes")
		released := log.ofKind(EventSlotReleased)
		require.Len(t, released, 1)
		assert.Equal(t, "c.example.net", released[0].Server)
		assert.Equal(t, 2, released[0].Limit)
		assert.GreaterOrEqual(t, released[0].Age, 5*time.Minute)
		assert.Equal(t, watchdog.Okay, c.Peers()[0].State())
		assert.Equal(t, watchdog.Okay, c.Peers()[1].State())
	})
}

// A request pinned by Destination-Host to a peer that the connection
// limit closes, still unanswered after the drain, fails as
// DIAMETER_UNABLE_TO_DELIVER: the failover hook runs after the member
// has let go of that peer, and must still know whom the request named.
func TestDestinationHostPinnedToTrimmedPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, cc := newFakeServer("a.example.net"), newFakeServer("b.example.net"), newFakeServer("c.example.net")
		cc.handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte {
			if _, ok := wire.FindAVP(req, message.DestinationHost, 0); ok {
				return nil // never answered
			}
			return cc.handler(ctx, p, req)
		}
		n := network{"tcp://a:1": a, "tcp://b:1": b, "tcp://c:1": cc}
		defer n.close()
		sw := newSwitchboard(n)
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:1", "tcp://b:1", "tcp://c:1")
		cfg.MaxConnections = 2
		cfg.Peer.Dialer = sw.dial
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		synctest.Wait()
		sw.setDown("tcp://a:1", true)
		a.dropConnections()
		synctest.Wait()
		require.NotNil(t, c.Peers()[2], "the third peer fills the slot")
		require.Equal(t, watchdog.Okay, c.Peers()[2].State())

		pinned := make(chan error, 1)
		go func() {
			_, err := c.Send(context.Background(), acrTo(1, "u@example.net", "c.example.net"))
			pinned <- err
		}()
		synctest.Wait()

		sw.setDown("tcp://a:1", false)
		time.Sleep(31*time.Second + 61*time.Second + 5*time.Minute)
		synctest.Wait()
		require.Nil(t, c.Peers()[2], "c was closed to respect the limit")
		err = <-pinned
		require.Error(t, err)
		assert.ErrorIs(t, err, ErrUnableToDeliver)
	})
}

// switchboard dials a network's servers, refusing those set down, and
// counts the dials.
type switchboard struct {
	n     network
	mu    sync.Mutex
	down  map[string]bool
	dials map[string]int
}

func newSwitchboard(n network) *switchboard {
	return &switchboard{n: n, down: map[string]bool{}, dials: map[string]int{}}
}

func (sw *switchboard) dial(ctx context.Context, url string) (transport.Conn, error) {
	sw.mu.Lock()
	sw.dials[url]++
	refused := sw.down[url]
	sw.mu.Unlock()
	if refused {
		return nil, errors.New("connection refused")
	}
	return sw.n[url].accept()
}

func (sw *switchboard) setDown(url string, down bool) {
	sw.mu.Lock()
	sw.down[url] = down
	sw.mu.Unlock()
}

func (sw *switchboard) dialed() map[string]int {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return maps.Clone(sw.dials)
}

// A request that moved off a SUSPECT connection, with no alternate, waits.
// When the server comes back on that connection and refuses it late (too
// busy, read after the move), the request learns that the server did not
// apply it and is sent there again once the refusal is forgotten, rather
// than avoiding its only server until its deadline.
func TestLateRefusalLetsTheRequestBack(t *testing.T) {
	for _, throttled := range []bool{false, true} {
		t.Run(map[bool]string{false: "waiting", true: "in the throttle's queue"}[throttled], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := network{"tcp://a:1": newFakeServer("a.example.net")}
				defer n.close()
				var busy atomic.Bool
				var applied atomic.Int32
				busyWhile(n["tcp://a:1"], &busy, nil, &applied)
				cfg := clientConfig(n, PrimarySecondary, "tcp://a:1")
				if throttled {
					cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxOutstanding: 8}}
				}
				var mu sync.Mutex
				var late []peer.Event
				cfg.Events = NewBus()
				defer cfg.Events.Subscribe(func(_ context.Context, e Event) {
					if e.Peer != nil && e.Peer.Kind == peer.EventLateRefusal {
						mu.Lock()
						late = append(late, *e.Peer)
						mu.Unlock()
					}
				})()
				c, err := New(cfg)
				require.NoError(t, err)
				defer c.Close(context.Background())
				waitOkay(t, c)

				n["tcp://a:1"].freeze()
				done := make(chan error, 1)
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
					defer cancel()
					_, err := c.Send(ctx, acr(1, "u1"))
					done <- err
				}()
				time.Sleep(70 * time.Second) // SUSPECT at 2 Tw: moved, no alternate: it waits
				busy.Store(true)
				n["tcp://a:1"].unfreeze() // the buffered request is refused, late
				time.Sleep(time.Second)
				busy.Store(false) // the server takes requests again
				select {
				case err := <-done:
					require.NoError(t, err)
				case <-time.After(time.Minute):
					t.Fatalf("the request still waits a minute after its server came back (%s)", c.Peers()[0].State())
				}
				assert.Equal(t, int32(1), applied.Load(), "applied once, on its second send there")
				synctest.Wait()
				mu.Lock()
				defer mu.Unlock()
				require.Len(t, late, 1, "one late refusal event")
				assert.Equal(t, uint32(message.TooBusy), late[0].ResultCode)
			})
		})
	}
}

// A request moved off a's connection to c is refused by a, late, while it
// is pending on c. When c then lets it go (c is removed, and its drain
// ends without an answer), a is the only server left: the refusal read on
// a's connection says a never applied it, so it goes to a again rather
// than waiting for its deadline.
func TestLateRefusalWhileInFlightElsewhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://c:1": newFakeServer("c.example.net")}
		defer n.close()
		var busy atomic.Bool
		var applied atomic.Int32
		busyWhile(n["tcp://a:1"], &busy, nil, &applied)
		n["tcp://c:1"].handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte {
			<-ctx.Done() // c never answers
			return nil
		}
		c, err := New(clientConfig(n, PrimarySecondary, "tcp://a:1", "tcp://c:1"))
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)

		n["tcp://a:1"].freeze()
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			_, err := c.Send(ctx, acr(1, "u1"))
			done <- err
		}()
		time.Sleep(70 * time.Second) // a SUSPECT at 2 Tw: the request moves to c
		busy.Store(true)
		n["tcp://a:1"].unfreeze() // a refuses the request, late, while it is pending on c
		time.Sleep(time.Second)
		busy.Store(false)
		_, err = c.SetPeers(context.Background(), []PeerSpec{spec(n, "tcp://a:1")})
		require.NoError(t, err)
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(2 * time.Minute):
			t.Fatal("the request still waits two minutes after c let it go, with a in service")
		}
		assert.Equal(t, int32(1), applied.Load(), "applied once, on its third send, a's again")
	})
}

// A request addressed to a by Destination-Host is lost when a's watchdog
// gives up on it, and a's refusal of it (3004, a thawed and too busy) is
// read before the Client has taken the hand-over: the request was lost
// first, so it still fails as DIAMETER_UNABLE_TO_DELIVER, as without the
// refusal, and is not sent to a again once the refusal is forgotten.
func TestLateRefusalBeforeHandOverOfPinnedRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net")}
		defer n.close()
		var busy atomic.Bool
		var seen atomic.Int32
		busyWhile(n["tcp://a:1"], &busy, &seen, nil)
		refusalRead := make(chan struct{})
		var once sync.Once
		var cp atomic.Pointer[Client]
		beforeRefresh = func() {
			if c := cp.Load(); c != nil && c.Peers()[0].State() == watchdog.Suspect {
				// On a's notifier: its hand-over waits behind this state
				// change. Thaw a now, and let its refusal in first.
				once.Do(func() {
					busy.Store(true)
					n["tcp://a:1"].unfreeze()
					<-refusalRead
				})
			}
		}
		defer func() { beforeRefresh = nil }()
		c, err := New(clientConfig(n, PrimarySecondary, "tcp://a:1", "tcp://b:1"))
		require.NoError(t, err)
		cp.Store(c)
		defer func() {
			c.Close(context.Background())
			<-c.Done() // the peers' last events, which call the hook, are delivered
		}()
		waitOkay(t, c)

		n["tcp://a:1"].freeze()
		done := make(chan error, 1)
		go func() {
			req := message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
				String(message.SessionID, 0, true, "s;1").
				String(message.OriginHost, 0, true, "client.example.net").
				String(message.OriginRealm, 0, true, "example.net").
				String(message.DestinationRealm, 0, true, "example.net").
				String(message.DestinationHost, 0, true, "a.example.net").Bytes()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			_, err := c.Send(ctx, req)
			done <- err
		}()
		time.Sleep(61 * time.Second) // a SUSPECT at 2 Tw, its refusal read meanwhile
		synctest.Wait()
		require.Equal(t, int32(1), seen.Load(), "a got the request once, and refused it")
		close(refusalRead)
		busy.Store(false)
		select {
		case err := <-done:
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrUnableToDeliver)
		case <-time.After(time.Minute):
			t.Fatal("the request still waits a minute after its host's hand-over")
		}
		synctest.Wait()
		assert.Equal(t, int32(1), seen.Load(), "not sent to a again")
		assert.Empty(t, n["tcp://b:1"].received(), "never to another host")
	})
}

// busyWhile makes f answer DIAMETER_TOO_BUSY while busy is set, and
// apply the request otherwise; seen counts every request it gets,
// applied those it applies (either may be nil).
func busyWhile(f *fakeServer, busy *atomic.Bool, seen, applied *atomic.Int32) {
	f.handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte {
		if seen != nil {
			seen.Add(1)
		}
		if busy.Load() {
			return message.NewAnswer(req).ResultCode(message.TooBusy).
				String(message.OriginHost, 0, true, f.host).
				String(message.OriginRealm, 0, true, "example.net").Bytes()
		}
		if applied != nil {
			applied.Add(1)
		}
		return f.handler(ctx, p, req)
	}
}

// A request its balanced server refuses as too busy is handed on to the
// same next server for every request of its key, not to whichever server
// a counter's turn gives: the requests of one subscriber that its server
// refuses land together.
func TestRefusedRequestsOfOneKeyGoToOneServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		urls := []string{"tcp://a:1", "tcp://b:1", "tcp://c:1", "tcp://d:1"}
		n := network{}
		for _, u := range urls {
			n[u] = newFakeServer(u[6:7] + ".example.net")
		}
		defer n.close()
		busy := map[string]*atomic.Bool{}
		for _, u := range urls {
			busy[u] = &atomic.Bool{}
			busyWhile(n[u], busy[u], nil, nil)
		}
		cfg := clientConfig(n, Balance, urls...)
		cfg.Algorithm = loadbalance.Pearson
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)
		home := map[string]string{}
		for i := range 40 {
			u := fmt.Sprintf("user%d@example.net", i)
			ans, err := c.Send(context.Background(), acr(i, u))
			require.NoError(t, err)
			home[u], _ = message.StringOf(ans, message.OriginHost, 0)
		}
		busy["tcp://a:1"].Store(true)
		moved := 0
		for u, h := range home {
			if h != "a.example.net" {
				continue
			}
			moved++
			var first string
			for k := range 4 {
				ans, err := c.Send(context.Background(), acr(1000+k, u))
				require.NoError(t, err)
				got, _ := message.StringOf(ans, message.OriginHost, 0)
				if k == 0 {
					first = got
				} else if got != first {
					t.Errorf("%s, refused by a, went to %s then %s", u, first, got)
				}
			}
		}
		require.NotZero(t, moved, "no subscriber of a among %v", home)
	})
}

// A failover that finds no alternate has its request wait: the record says
// parked, as decided, even when the request ends the moment after it
// began to wait (its caller's deadline, made to fall there by the
// onStrand hook, or a late answer on the old connection). The record was
// made from the request's state read after, and said refused ("the last
// refusal is the answer") though no peer refused it.
func TestFailoverRecordedAsDecided(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFakeServer("a.example.net")
		n := network{"tcp://a:3868": srv}
		defer n.close()
		c, err := New(clientConfig(n, PrimarySecondary, "tcp://a:3868"))
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)
		onStrand = func(calls []*call.Call) {
			for _, cl := range calls {
				cl.Fail(errors.New("the caller's deadline, at this moment"))
			}
		}
		defer func() { onStrand = nil }()
		srv.freeze()
		done := make(chan error, 1)
		go func() {
			_, err := c.Send(context.Background(), acr(1, "u@example.net"))
			done <- err
		}()
		time.Sleep(61 * time.Second) // SUSPECT: the failover finds no alternate
		synctest.Wait()
		require.Error(t, <-done)
		recs, _ := c.FailoverLog()
		parked := 0
		for _, r := range recs {
			assert.NotEqual(t, Refused, r.Outcome, "no peer refused the request: %+v", r)
			if r.Outcome == Parked {
				parked += r.Moved
			}
		}
		assert.Equal(t, 1, parked, "records %+v", recs)
		srv.unfreeze()
	})
}

// A request naming the failed peer in Destination-Host is not moved (it
// fails DIAMETER_UNABLE_TO_DELIVER): ServerStats.FailedOver, the requests
// moved away from the server, does not count it.
func TestPinnedNotCountedFailedOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:3868": newFakeServer("a.example.net"), "tcp://b:3868": newFakeServer("b.example.net")}
		defer n.close()
		c, err := New(clientConfig(n, PrimarySecondary, "tcp://a:3868", "tcp://b:3868"))
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)
		n["tcp://a:3868"].freeze()
		_, err = c.Send(context.Background(), acrTo(1, "u@example.net", "a.example.net"))
		require.ErrorIs(t, err, ErrUnableToDeliver)
		recs, _ := c.FailoverLog()
		moved := 0
		for _, r := range recs {
			moved += r.Moved
		}
		st := c.ServerStats()[0]
		assert.Zero(t, moved, "records %+v", recs)
		assert.Equal(t, uint64(moved), st.FailedOver, "records moved %d; stats failed_over %d", moved, st.FailedOver)
	})
}

// A peer the connection limit closed is still one of ours, whose identity
// we know: a new request naming it in Destination-Host fails at once as
// DIAMETER_UNABLE_TO_DELIVER, as those in flight to it when it closed do
// (TestDestinationHostPinnedToTrimmedPeer). It went to the other hosts,
// each answering 3002 in turn.
func TestNewRequestPinnedToTrimmedPeerUndeliverable(t *testing.T) {
	t.Run("dispatch", func(t *testing.T) { newRequestPinnedToTrimmedPeer(t, false) })
	t.Run("throttle", func(t *testing.T) { newRequestPinnedToTrimmedPeer(t, true) })
}

func newRequestPinnedToTrimmedPeer(t *testing.T, throttled bool) {
	synctest.Test(t, func(t *testing.T) {
		a, b, cc := newFakeServer("a.example.net"), newFakeServer("b.example.net"), newFakeServer("c.example.net")
		n := network{"tcp://a:1": a, "tcp://b:1": b, "tcp://c:1": cc}
		defer n.close()
		sw := newSwitchboard(n)
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:1", "tcp://b:1", "tcp://c:1")
		cfg.MaxConnections = 2
		cfg.Peer.Dialer = sw.dial
		if throttled {
			cfg.Throttle = &Throttle{}
		}
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		synctest.Wait()
		sw.setDown("tcp://a:1", true)
		a.dropConnections()
		synctest.Wait()
		require.NotNil(t, c.Peers()[2], "the third peer fills the slot")
		require.Equal(t, watchdog.Okay, c.Peers()[2].State())
		_, err = c.Send(context.Background(), acrTo(1, "u@example.net", "c.example.net"))
		require.NoError(t, err, "c answers what names it while connected")

		sw.setDown("tcp://a:1", false)
		time.Sleep(31*time.Second + 61*time.Second + 5*time.Minute)
		synctest.Wait()
		require.Nil(t, c.Peers()[2], "c was closed to respect the limit")

		req := acrTo(2, "u@example.net", "C.example.net") // identities ignore case
		wire.SetEndToEnd(req, 4242)
		start := time.Now()
		_, err = c.Send(context.Background(), req)
		require.ErrorIs(t, err, ErrUnableToDeliver)
		assert.Zero(t, time.Since(start), "it failed at once")
		for name, f := range map[string]*fakeServer{"a": a, "b": b} {
			for _, s := range f.received() {
				assert.NotEqual(t, uint32(4242), s.e2e, "the request naming c.example.net went to %s", name)
			}
		}
		_, err = c.Send(context.Background(), acrTo(3, "u@example.net", "elsewhere.example.net"))
		require.NoError(t, err, "a host that is not a peer: routed by realm")

		if throttled {
			return
		}
		// Handed over by a failover of another peer, such a request fails
		// the same way, with its record.
		req = acrTo(4, "u@example.net", "c.example.net")
		wire.SetEndToEnd(req, 4343)
		cl, err := peer.NewCall(req, false)
		require.NoError(t, err)
		cl.Deadline = time.Now().Add(time.Hour)
		c.onFailover(c.Peers()[0], []*call.Call{cl}, "test failover")
		_, err = cl.Wait(context.Background(), time.Hour)
		require.ErrorIs(t, err, ErrUnableToDeliver)
		recs, _ := c.FailoverLog()
		last := recs[len(recs)-1]
		assert.Equal(t, Refused, last.Outcome)
		assert.Equal(t, []uint32{4343}, last.EndToEnd)
		assert.Contains(t, last.Reason, "closed for the connection limit")
	})
}
