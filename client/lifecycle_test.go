package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The requests waiting for a peer are bounded: past maxWaiting a request
// that finds none fails with ErrNoPeer at once (here the last of the
// failover's four), the others keep waiting and are answered once a peer
// is back.
func TestWaitingBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer func(n int) { maxWaiting = n }(maxWaiting)
		maxWaiting = 3
		srv := newFakeServer("a.example.net")
		n := network{"tcp://a:3868": srv}
		defer n.close()
		c, err := New(clientConfig(n, PrimarySecondary, "tcp://a:3868"))
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)
		srv.freeze()
		errs := make([]chan error, 4)
		for i := range errs {
			errs[i] = make(chan error, 1)
			go func() {
				_, err := c.Send(context.Background(), acr(i, "u@example.net"))
				errs[i] <- err
			}()
			time.Sleep(time.Millisecond) // a definite order
		}
		time.Sleep(61 * time.Second) // SUSPECT: all four wait, the last is one too many
		synctest.Wait()
		select {
		case err := <-errs[3]:
			assert.ErrorIs(t, err, ErrNoPeer)
		default:
			t.Fatal("the request past the bound did not fail")
		}
		assert.EqualValues(t, 3, c.waiting.Load())
		srv.unfreeze() // its answers come on the connection they were sent on
		for _, ch := range errs[:3] {
			assert.NoError(t, <-ch)
		}
		// Answered on the connection they were lost on, which they may
		// not be sent on again: their waiter lets them go by their
		// deadline.
		time.Sleep(c.cfg.RequestTimeout)
		synctest.Wait()
		assert.Zero(t, c.waiting.Load())
	})
}

// A request that finds no peer in service, and a peer that comes into
// service before the request is parked: the request is sent to it, not
// left parked until the next peer comes up (a lost wake-up the first
// request after New could hit on a loaded machine).
func TestPeerUpWhileRequestParks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFakeServer("a.example.net")
		n := network{"tcp://a:3868": srv}
		defer n.close()
		srv.freeze() // the capabilities exchange waits
		c, err := New(clientConfig(n, PrimarySecondary, "tcp://a:3868"))
		require.NoError(t, err)
		defer c.Close(context.Background())
		synctest.Wait()
		require.Zero(t, c.inService(), "not in service yet")
		windows := 0
		beforeStrand = func([]*call.Call) {
			windows++
			if windows == 1 {
				srv.unfreeze()
				synctest.Wait() // in service, and its OKAY handled
			}
		}
		defer func() { beforeStrand = nil }()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err = c.Send(ctx, acr(1, "u@example.net"))
		require.NoError(t, err, "sent to the peer that came up")
		assert.Equal(t, 1, windows, "the request looked once more and found it")
		assert.Zero(t, c.waiting.Load())
	})
}

// A waiter whose round places the request with the latest deadline and
// keeps one with an earlier deadline ends once that one's caller has given
// up, not at the deadline of the request that left: it would keep the
// request counted against the waiting bound, and its goroutine, for
// nothing. Here a request pinned by Destination-Host to b, which went
// down, and an unpinned one wait together; a comes up and takes the
// unpinned one.
func TestWaiterEndsByTheDeadlinesItStillHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newFakeServer("a.example.net"), newFakeServer("b.example.net")
		n := network{"tcp://a:3868": a, "tcp://b:3868": b}
		defer n.close()
		a.freeze() // the capabilities exchange waits
		var bDown atomic.Bool
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:3868", "tcp://b:3868")
		cfg.Peer.Dialer = func(ctx context.Context, url string) (transport.Conn, error) {
			if url == "tcp://b:3868" && bDown.Load() {
				return nil, errors.New("connection refused")
			}
			return n.dialer(ctx, url)
		}
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		synctest.Wait()
		require.Equal(t, 1, c.inService(), "b, whose identity the Client learns")
		bDown.Store(true)
		b.dropConnections()
		synctest.Wait()
		require.Zero(t, c.inService())

		pinned := message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
			String(message.SessionID, 0, true, "s;1").
			String(message.OriginHost, 0, true, "client.example.net").
			String(message.OriginRealm, 0, true, "example.net").
			String(message.DestinationRealm, 0, true, "example.net").
			String(message.DestinationHost, 0, true, "b.example.net").Bytes()
		later, err := peer.NewCall(acr(1, "u@example.net"), false)
		require.NoError(t, err)
		sooner, err := peer.NewCall(pinned, false)
		require.NoError(t, err)
		later.Deadline = time.Now().Add(10 * time.Minute)
		sooner.Deadline = time.Now().Add(time.Minute)
		errs := make(chan error, 2)
		for _, cl := range []*call.Call{later, sooner} {
			go func() {
				ctx, cancel := context.WithDeadline(context.Background(), cl.Deadline)
				defer cancel()
				errs <- cl.Await(ctx, 0).Err
			}()
		}
		c.strand([]*call.Call{later, sooner}, c.view()) // one waiter, as a failover's batch
		line, waiting := waitersLeft(c)
		require.Equal(t, 1, line)
		require.EqualValues(t, 2, waiting)

		a.unfreeze()
		require.NoError(t, <-errs, "the unpinned request went to a")
		assert.ErrorIs(t, <-errs, call.ErrTimeout, "b never came up")
		time.Sleep(time.Second)
		synctest.Wait()
		line, waiting = waitersLeft(c)
		assert.Zero(t, line, "the waiter ended once its last request's caller gave up")
		assert.Zero(t, waiting)
	})
}

// A request deadline shorter than failover detection is logged at New,
// naming both; the default covers it.
func TestShortDeadlineWarned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:3868": newFakeServer("a.example.net")}
		defer n.close()
		var mu sync.Mutex
		var buf bytes.Buffer
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:3868")
		cfg.Peer.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: slog.LevelWarn}))
		cfg.RequestTimeout = 5 * time.Second
		c, err := New(cfg)
		require.NoError(t, err)
		c.Close(context.Background())
		mu.Lock()
		out := buf.String()
		mu.Unlock()
		assert.Contains(t, out, "shorter than failover detection")
		assert.Contains(t, out, "deadline=5s")
		assert.Contains(t, out, "detection=1m4s")

		cfg.RequestTimeout = 0
		buf.Reset()
		c, err = New(cfg)
		require.NoError(t, err)
		assert.Equal(t, 74*time.Second, c.cfg.RequestTimeout, "default: detection plus the answer time")
		c.Close(context.Background())
		mu.Lock()
		assert.False(t, strings.Contains(buf.String(), "shorter than"))
		mu.Unlock()
	})
}

// A RADIUS Client warns through its RADIUS logger, the one it was given.
func TestShortDeadlineWarnedRADIUS(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var buf bytes.Buffer
		cfg := Config{Peers: []PeerSpec{{URL: "radius+tcp://r:1812"}}, RequestTimeout: 2 * time.Second}
		cfg.RADIUS.Secret = []byte("s")
		cfg.RADIUS.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: slog.LevelWarn}))
		cfg.RADIUS.Dialer = func(ctx context.Context, url string) (transport.Conn, error) { return nil, errors.New("refused") }
		c, err := New(cfg)
		require.NoError(t, err)
		c.Close(context.Background())
		mu.Lock()
		defer mu.Unlock()
		assert.Contains(t, buf.String(), "shorter than failover detection")
	})
}

// SetPeers keeps the deadline New set, derived or given, and says when
// the new peers need longer to be failed over than it leaves (a longer
// Tw), as New says it; a set they fit says nothing.
func TestShortDeadlineWarnedAtSetPeers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:3868": newFakeServer("a.example.net"), "tcp://b:3868": newFakeServer("b.example.net")}
		defer n.close()
		var mu sync.Mutex
		var buf bytes.Buffer
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:3868")
		cfg.Peer.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: slog.LevelWarn}))
		cfg.Peers[0].Tw = 6 * time.Second // detection 16s, the deadline derived 26s
		cfg.RequestTimeout = 0
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		require.Equal(t, 26*time.Second, c.cfg.RequestTimeout)
		read := func() string {
			mu.Lock()
			defer mu.Unlock()
			out := buf.String()
			buf.Reset()
			return out
		}
		require.NotContains(t, read(), "shorter than")

		_, err = c.SetPeers(context.Background(), []PeerSpec{cfg.Peers[0], {URL: "tcp://b:3868", Name: "b.example.net", Tw: 6 * time.Second}})
		require.NoError(t, err)
		assert.NotContains(t, read(), "shorter than", "the peers fit the deadline")

		_, err = c.SetPeers(context.Background(), []PeerSpec{cfg.Peers[0], {URL: "tcp://b:3868", Name: "b.example.net", Tw: 30 * time.Second}})
		require.NoError(t, err)
		out := read()
		assert.Contains(t, out, "shorter than failover detection")
		assert.Contains(t, out, "deadline=26s")
		assert.Contains(t, out, "detection=1m4s")
	})
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Close may be called more than once, from several goroutines at once:
// the first shuts the Client down, the others wait for that shutdown (a
// throttled Client's dispatcher is stopped once), or for their own ctx.
func TestCloseTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net")}
		defer n.close()
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:1")
		cfg.Throttle = &Throttle{}
		c, err := New(cfg)
		require.NoError(t, err)
		waitOkay(t, c)
		errs := make(chan error, 2)
		for range 2 {
			go func() { errs <- c.Close(context.Background()) }()
		}
		for range 2 {
			require.NoError(t, <-errs)
			select {
			case <-c.shut: // every peer closed (their events may still be on their way)
			default:
				t.Error("a Close returned before the shutdown ended")
			}
		}
		<-c.Done()
		for _, p := range c.Peers() {
			select {
			case <-p.Done():
			default:
				t.Error("Done before every peer ended")
			}
		}
		assert.NoError(t, c.Close(context.Background()))
	})
}

// A subscriber may Close the Client with the context it got: Close starts
// the shutdown and returns at once (here while the server, frozen, leaves
// the DPR unanswered), requests fail with ErrClosed from then on, and Done
// is closed once every peer has ended, after its DPA timeout.
func TestCloseFromSubscriber(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFakeServer("a.example.net")
		n := network{"tcp://a:1": srv}
		defer n.close()
		cfg := clientConfig(n, Balance, "tcp://a:1")
		var c atomic.Pointer[Client]
		ready := make(chan struct{})
		closed := make(chan error, 1)
		var took time.Duration
		var once sync.Once
		cfg.Events = NewBus()
		cancel := cfg.Events.Subscribe(func(ctx context.Context, e Event) {
			if e.Kind == EventPeer && e.Peer.Kind == peer.EventWatchdog && e.Peer.To == watchdog.Okay {
				once.Do(func() {
					<-ready
					srv.freeze()
					start := time.Now()
					err := c.Load().Close(ctx)
					took = time.Since(start)
					closed <- err
				})
			}
		})
		defer cancel()
		cl, err := New(cfg)
		require.NoError(t, err)
		c.Store(cl)
		close(ready)
		require.NoError(t, <-closed, "Close from a subscriber returns")
		assert.Zero(t, took, "without waiting for the DPA")
		_, err = cl.Send(context.Background(), acr(1, "u@example.net"))
		assert.ErrorIs(t, err, peer.ErrClosed)
		start := time.Now()
		<-cl.Done()
		assert.Equal(t, peer.DefaultDPATimeout, time.Since(start), "the DPA had its time")
		for _, p := range cl.Peers() {
			select {
			case <-p.Done():
			default:
				t.Error("Done before every peer ended")
			}
		}
	})
}

// A request whose context ended before Send (cancelled, or its deadline
// past) is not sent: no server answers, or applies, what nobody waits
// for. It fails with the context's error, and with a throttle it holds
// no place there. A request with a live context that follows is sent.
func TestSendWithEndedContextSendsNothing(t *testing.T) {
	for _, throttled := range []bool{false, true} {
		t.Run(fmt.Sprintf("throttle=%v", throttled), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newFakeServer("a.example.net")
				n := network{"tcp://a:3868": srv}
				defer n.close()
				cfg := clientConfig(n, PrimarySecondary, "tcp://a:3868")
				if throttled {
					cfg.Throttle = &Throttle{}
				}
				c, err := New(cfg)
				require.NoError(t, err)
				defer c.Close(context.Background())
				synctest.Wait()
				require.Equal(t, 1, c.inService())

				canceled, cancel := context.WithCancel(context.Background())
				cancel()
				_, err = c.Send(canceled, acr(1, "u@example.net"))
				assert.ErrorIs(t, err, context.Canceled)
				past, cancelPast := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
				defer cancelPast()
				_, err = c.Send(past, acr(2, "u@example.net"))
				assert.ErrorIs(t, err, peer.ErrTimeout)
				synctest.Wait()
				assert.Empty(t, srv.received(), "a request whose caller gave up before Send was sent")
				if throttled {
					for _, st := range c.ServerStats() {
						assert.Equal(t, [2]int{}, st.Throttle.Outstanding)
						assert.Zero(t, st.Throttle.Depth)
					}
				}

				live := acr(3, "u@example.net")
				_, err = c.Send(context.Background(), live)
				require.NoError(t, err)
				got := srv.received()
				require.Len(t, got, 1)
				assert.Equal(t, wire.EndToEnd(live), got[0].e2e, "only the live request went out")
			})
		})
	}
}

// strand returns the requests it had wait for the caller's records
// (dispatchAll reads them after it returns), and its waiter must not
// compact that slice under the caller as its requests end: it did, in
// place (a data race under -race, and a reader of the returned slice
// could find a request shifted or nil).
func TestStrandedSliceIsTheCallers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newFakeServer("a.example.net")
		a.freeze() // never in service: nowhere to place anything
		n := network{"tcp://a:1": a}
		defer n.close()
		c, err := New(clientConfig(n, PrimarySecondary, "tcp://a:1"))
		require.NoError(t, err)
		defer c.Close(context.Background())
		synctest.Wait()
		require.Zero(t, c.inService())
		c1, err := peer.NewCall(acr(1, "u@example.net"), false)
		require.NoError(t, err)
		c2, err := peer.NewCall(acr(2, "u@example.net"), false)
		require.NoError(t, err)
		c2.Deadline = time.Now().Add(time.Minute)
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithDeadline(context.Background(), c2.Deadline)
			defer cancel()
			done <- c2.Await(ctx, 0).Err
		}()
		wait, _, _ := c.strand([]*call.Call{c1, c2}, c.view())
		require.Equal(t, []*call.Call{c1, c2}, wait)
		c1.Fail(errors.New("its caller gave up"))
		assert.ErrorIs(t, <-done, call.ErrTimeout)
		time.Sleep(time.Second) // the waiter's timer, at c2's deadline, drops both
		synctest.Wait()
		line, _ := waitersLeft(c)
		require.Zero(t, line)
		assert.Equal(t, []*call.Call{c1, c2}, wait, "the waiter compacted the caller's slice")
		a.unfreeze()
	})
}
