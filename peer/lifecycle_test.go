package peer

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// An event subscriber, and the failover hook, run without the peer's mutex and
// off its reader: one may Close the peer (here on the first failover
// hand-over and on the SUSPECT transition) and Close returns.
func TestCloseFromSubscriberAndOnFailover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.Events = NewBus()
		closed := make(chan error, 2)
		var p *Peer
		cfg.Failover = func(from call.Carrier, calls []*call.Call, reason string) {
			for _, cl := range calls {
				cl.Fail(errors.New("no alternate"))
			}
			closed <- from.(*Peer).Close(context.Background())
		}
		cancel := cfg.Events.Subscribe(func(_ context.Context, e Event) {
			if e.Kind == EventWatchdog && e.To == watchdog.Suspect {
				closed <- p.Close(context.Background())
			}
		})
		defer cancel()
		var err error
		p, err = Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		synctest.Wait()
		require.Equal(t, watchdog.Okay, p.State())
		f.answerDWR.Store(false)
		f.answerReqs.Store(false)
		res := make(chan error, 1)
		go func() {
			_, err := p.Request(context.Background(), acr())
			res <- err
		}()
		time.Sleep(61 * time.Second) // SUSPECT: the failover, then the event
		synctest.Wait()
		assert.NoError(t, <-closed)
		assert.NoError(t, <-closed)
		assert.Error(t, <-res)
		<-p.Done()
	})
}

// Close called by a subscriber with the context it got starts the
// shutdown and returns at once, without waiting for the DPA (here one
// that never comes): the events of the close that follow reach the same
// subscriber, and Done closes once the DPA timeout has passed. Called
// with any other context, Close waits for the DPA as always.
func TestCloseWithTheSubscribersContextDoesNotWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		f.dropDPR.Store(true)
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.Events = NewBus()
		var pp atomic.Pointer[Peer]
		ready := make(chan struct{})
		took := make(chan time.Duration, 1)
		var down atomic.Int32
		cancel := cfg.Events.Subscribe(func(ctx context.Context, e Event) {
			switch {
			case e.Kind == EventWatchdog && e.To == watchdog.Okay:
				<-ready
				start := time.Now()
				if err := pp.Load().Close(ctx); err != nil {
					t.Errorf("Close: %v", err)
				}
				took <- time.Since(start)
			case e.Kind == EventConnDown:
				down.Add(1)
			}
		})
		defer cancel()
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		pp.Store(p)
		close(ready)
		assert.Zero(t, <-took, "Close returned as the DPR left")
		start := time.Now()
		<-p.Done()
		assert.Equal(t, DefaultDPATimeout, time.Since(start), "the DPA was waited for after Close returned")
		assert.EqualValues(t, 1, down.Load(), "the close's own event reached the subscriber")

		// Another context: Close waits for the DPA.
		cfg2 := clientConfig("client.example.net")
		cfg2.Dialer = f.dialer()
		q, err := Dial("tcp://x:1", cfg2)
		require.NoError(t, err)
		require.NoError(t, q.WaitState(context.Background(), watchdog.Okay))
		start = time.Now()
		q.Close(context.Background())
		assert.Equal(t, DefaultDPATimeout, time.Since(start))
	})
}

// Close does not wait for subscribers: it returns while one still holds
// an event, and Done is closed only once that subscriber returned and
// the events queued behind it (the close's own) are delivered.
func TestDoneWaitsForSubscribersCloseDoesNot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.Events = NewBus()
		release := make(chan struct{})
		var held, after atomic.Int32
		cancel := cfg.Events.Subscribe(func(_ context.Context, e Event) {
			if e.Kind == EventWatchdog && e.To == watchdog.Okay && held.Add(1) == 1 {
				<-release // a slow subscriber
				return
			}
			if held.Load() > 0 {
				after.Add(1)
			}
		})
		defer cancel()
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		synctest.Wait()
		require.Equal(t, int32(1), held.Load(), "the subscriber holds the OKAY event")
		require.NoError(t, p.Close(context.Background()), "Close returns while a subscriber is busy")
		select {
		case <-p.Done():
			t.Fatal("Done before the events are delivered")
		default:
		}
		assert.Zero(t, after.Load())
		close(release)
		<-p.Done()
		assert.Positive(t, after.Load(), "the close's events delivered before Done")
	})
}

// The lifecycle's rules on one connection: a call is never queued twice
// on it, is parked only when not in flight, and a call moved off leaves
// the pending map at once while its late answer is still matched.
func TestCallLifecycleOnOneConnection(t *testing.T) {
	cn := newConn(nil, nil, "x")
	cl, err := newCall(acr(), false)
	require.NoError(t, err)
	assert.Equal(t, call.Queued, cl.State())
	cn.mu.Lock()
	_, id, b, err := cl.board(cn)
	cn.pending.put(id, cl)
	cn.mu.Unlock()
	require.NoError(t, err)
	assert.Equal(t, call.Queued, b.Prev)
	assert.Equal(t, call.InFlight, cl.State())
	assert.False(t, cl.Park(), "an in-flight call is not parked")

	moved, _ := cn.moveOut(nil, nil)
	require.Equal(t, []*call.Call{&cl.Call}, moved)
	assert.Equal(t, call.Moved, cl.State())
	assert.Zero(t, cn.pendingLen(), "moved off: not pending here")
	_, _, _, err = cl.board(cn)
	assert.ErrorIs(t, err, ErrAlreadySent, "never twice on one connection")
	assert.True(t, cl.Park())
	assert.Equal(t, call.Parked, cl.State())

	got, late, _ := cn.match(id, nil)
	assert.Same(t, cl, got, "a late answer is still matched")
	assert.True(t, late)
	ok, _ := cl.Finish([]byte("answer"), 0, nil, &cn.h, nil)
	assert.True(t, ok)
	assert.Equal(t, call.Answered, cl.State())
	assert.False(t, cl.Fail(errors.New("too late")), "complete once")
}

// Every send after the first works on a copy with a new Hop-by-Hop id
// and the T flag; a resend after a refusal (too busy) clears it unless a
// send before was lost; the first send's bytes are the caller's.
func TestBoardSetsRetransmitFlagOnResends(t *testing.T) {
	a, b, c := newConn(nil, nil, "a"), newConn(nil, nil, "b"), newConn(nil, nil, "c")
	req := acr()
	wire.SetRetransmit(req)
	cl, err := newCall(req, false)
	require.NoError(t, err)
	raw1, id1, _, err := cl.board(a)
	require.NoError(t, err)
	assert.Same(t, &req[0], &raw1[0], "the first send writes into the caller's bytes")
	assert.Zero(t, wire.Flags(raw1)&wire.FlagRetransmit, "an originator's first send clears T")
	require.True(t, cl.Leave(&a.h, nil))
	raw2, id2, _, err := cl.board(b)
	require.NoError(t, err)
	assert.NotSame(t, &raw1[0], &raw2[0], "a resend is a copy")
	assert.NotZero(t, wire.Flags(raw2)&wire.FlagRetransmit, "a replay after a failover sets T")
	assert.Equal(t, id1, wire.HopByHop(raw1), "the first send's bytes keep their id")
	assert.Equal(t, id2, wire.HopByHop(raw2))
	require.True(t, cl.Refuse(&b.h, []byte("too busy"), 0, nil))
	raw3, _, bo, err := cl.board(c)
	require.NoError(t, err)
	assert.True(t, bo.AfterRefusal)
	assert.True(t, bo.Lost)
	assert.NotZero(t, wire.Flags(raw3)&wire.FlagRetransmit, "a resend after a refusal, the send to a lost before: a possible duplicate of that one")
	assert.Equal(t, 3, cl.Sends())

	// Refused without a loss before: no T.
	cl2, err := newCall(acr(), false)
	require.NoError(t, err)
	_, _, _, err = cl2.board(b)
	require.NoError(t, err)
	require.True(t, cl2.Refuse(&b.h, []byte("too busy"), 0, nil))
	raw4, _, bo, err := cl2.board(c)
	require.NoError(t, err)
	assert.True(t, bo.AfterRefusal)
	assert.False(t, bo.Lost)
	assert.Zero(t, wire.Flags(raw4)&wire.FlagRetransmit, "a resend after a refusal: that request was not lost")
}

// The calls moved off a connection stay matchable up to goneMax; past it
// the oldest is forgotten.
func TestMovedCallsBounded(t *testing.T) {
	cn := newConn(nil, nil, "x")
	cl, err := newCall(acr(), false)
	require.NoError(t, err)
	cn.mu.Lock()
	for id := range uint32(goneMax + 10) {
		cn.goLocked(id+1, cl)
	}
	cn.mu.Unlock()
	assert.Len(t, cn.gone, goneMax)
	_, late, _ := cn.match(1, nil)
	assert.False(t, late, "the oldest was forgotten")
	got, late, _ := cn.match(goneMax+10, nil)
	assert.True(t, late)
	assert.Same(t, cl, got)
}

// A lost connection keeps its calls matchable: the reader may still hand
// on answers it had received before the loss (a write that failed while
// they sat in its buffer), and those complete their calls, whether the
// call was still pending there or had moved off before.
func TestLostConnectionKeepsAnswersMatchable(t *testing.T) {
	cn := newConn(nil, nil, "x")
	board := func() (*dcall, uint32) {
		cl, err := newCall(acr(), false)
		require.NoError(t, err)
		cn.mu.Lock()
		_, id, _, err := cl.board(cn)
		cn.pending.put(id, cl)
		cn.mu.Unlock()
		require.NoError(t, err)
		return cl, id
	}
	movedCall, movedID := board()
	moved, _ := cn.moveOut(nil, nil)
	require.Len(t, moved, 1)
	pendingCall, pendingID := board()

	taken, _ := cn.takePending(nil)
	require.Equal(t, []*call.Call{&pendingCall.Call}, taken)
	assert.Zero(t, cn.pendingLen())
	for _, c := range []struct {
		id uint32
		cl *dcall
	}{{movedID, movedCall}, {pendingID, pendingCall}} {
		got, late, _ := cn.match(c.id, nil)
		assert.Same(t, c.cl, got, "an answer read before the loss still finds its call")
		assert.True(t, late)
	}
}

// The allow-list compares DiameterIdentities ignoring case.
func TestAllowHostsIgnoresCase(t *testing.T) {
	c := Config{AllowHosts: []string{"*.Example.NET", "exact.example.org"}}
	for host, want := range map[string]bool{
		"client.example.net": true, "CLIENT.EXAMPLE.NET": true, "Exact.Example.Org": true, "client.example.com": false,
	} {
		assert.Equal(t, want, c.allowed(host), host)
	}
}

// One call record is made per request: it stays within the 448-byte
// size class, so that a field added to it is a decision, not a drift
// (a field too many took every request to the 512-byte class).
func TestCallRecordSize(t *testing.T) {
	if got := unsafe.Sizeof(dcall{}); got > 448 {
		t.Errorf("dcall is %d bytes, past the 448-byte size class", got)
	}
}

// Close called from two goroutines at once, the DPR unanswered, one with a
// deadline that ends the Peer without its DPA: neither returns before
// every request pending on the connection has been failed. The socket's
// close takes a second after the reader has seen it (a TLS close_notify):
// the Peer must not be marked ended until its requests are failed, after
// that close, or the other Close would return in between.
func TestConcurrentCloseReturnsAfterPendingFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		f.answerReqs.Store(false)
		f.dropDPR.Store(true)
		cfg := clientConfig("client.example.net")
		dial := f.dialer()
		cfg.Dialer = func(ctx context.Context, url string) (transport.Conn, error) {
			c, err := dial(ctx, url)
			return slowClose{c}, err
		}
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		synctest.Wait()
		require.Equal(t, watchdog.Okay, p.State())
		calls := make([]*dcall, 100)
		for i := range calls {
			calls[i], err = newCall(acr(), false)
			require.NoError(t, err)
			require.NoError(t, p.submit(calls[i]))
		}
		synctest.Wait()
		var wg sync.WaitGroup
		for k := range 2 {
			wg.Go(func() {
				ctx := context.Background()
				if k == 0 { // this one ends the Peer, at its deadline
					c, cancel := context.WithTimeout(ctx, time.Second)
					defer cancel()
					ctx = c
				}
				p.Close(ctx)
				left := 0
				for _, cl := range calls {
					if !cl.IsDone() {
						left++
					}
				}
				assert.Zero(t, left, "requests not failed yet when Close returned")
			})
		}
		wg.Wait()
	})
}

// slowClose is a connection whose Close returns a second after the
// socket is closed.
type slowClose struct{ transport.Conn }

func (c slowClose) Close() error {
	err := c.Conn.Close()
	time.Sleep(time.Second)
	return err
}
