package client

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/wire"
	"github.com/stretchr/testify/assert"
)

// TestAppliedRequestNotConcludedWithRefusal: a request applied by a
// server whose answer was then lost (its connection reset), and refused
// too busy by the only alternate, must not be answered with that
// refusal: 3004 tells the caller the request was not applied, which is
// false (RFC 6733 7.1.3), and a caller that sends it again under a new
// End-to-End id applies it twice. It waits for a server (the first one
// reconnects, and its duplicate store answers the replay) until its
// deadline (call.Call.Conclude). TestSim found it in its schedules.
func TestAppliedRequestNotConcludedWithRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := dedup.NewMemory()
		defer store.Close()
		a, b := newFakeServer("a.example.net"), newFakeServer("b.example.net")
		var applied atomic.Int32
		a.handle = dedup.WrapCommit(store, func(ctx context.Context, p *peer.Peer, req []byte) []byte {
			time.Sleep(2 * time.Second)
			return a.handler(ctx, p, req)
		}, func(req, ans []byte) { applied.Add(1) }, nil)
		b.handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte { // overloaded: refuses before applying
			return message.NewAnswer(req).ResultCode(message.TooBusy).
				String(message.OriginHost, 0, true, "b.example.net").
				String(message.OriginRealm, 0, true, "example.net").Bytes()
		}
		n := network{"tcp://a:3868": a, "tcp://b:3868": b}
		defer n.close()
		c, err := New(clientConfig(n, PrimarySecondary, "tcp://a:3868", "tcp://b:3868"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		synctest.Wait()

		req := acr(1, "user@example.net")
		wire.SetEndToEnd(req, 1)
		var ans []byte
		var sendErr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			ans, sendErr = c.Send(ctx, req)
		}()
		time.Sleep(time.Second)
		a.freeze() // a applies the request at 2 s; its answer cannot leave
		time.Sleep(2 * time.Second)
		a.dropConnections() // the answer is lost with the connection
		time.Sleep(time.Second)
		a.unfreeze()
		<-done
		rc, _ := message.ResultCodeOf(ans)
		if applied.Load() != 1 || sendErr != nil || rc != message.Success {
			t.Errorf("applied %d times; Send returned result %d, error %v: want the first server's 2001", applied.Load(), rc, sendErr)
		}
	})
}

// A refusal (3002 here) that arrives late, on the connection a request
// left in a failover, does not complete it: the request went on to
// another server, which may apply it; that server's answer completes it.
func TestLateRefusalDoesNotComplete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newFakeServer("a.example.net"), newFakeServer("b.example.net")
		a.handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte { // misrouted: refuses
			return message.NewAnswer(req).ResultCode(message.UnableToDeliver).
				String(message.OriginHost, 0, true, "a.example.net").
				String(message.OriginRealm, 0, true, "example.net").Bytes()
		}
		var applied atomic.Int32
		b.handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte {
			time.Sleep(20 * time.Second) // slow: a's refusal comes back first
			applied.Add(1)
			return b.handler(ctx, p, req)
		}
		n := network{"tcp://a:3868": a, "tcp://b:3868": b}
		defer n.close()
		c, err := New(clientConfig(n, PrimarySecondary, "tcp://a:3868", "tcp://b:3868"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		synctest.Wait()
		a.freeze() // a's refusal is held: a goes SUSPECT and its request moves to b
		res := make(chan []byte, 1)
		go func() {
			ans, err := c.Send(context.Background(), acr(1, "user@example.net"))
			if err != nil {
				t.Error(err)
			}
			res <- ans
		}()
		time.Sleep(70 * time.Second) // two Tw: failover to b
		a.unfreeze()                 // the late 3002 arrives, b still applying
		ans := <-res
		rc, _ := message.ResultCodeOf(ans)
		assert.Equal(t, uint32(message.Success), rc, "b's answer, not a's late refusal")
		assert.Equal(t, int32(1), applied.Load())
	})
}

// A request lost with its connection and then refused too busy by every
// peer is not left waiting for ever while they are in service: it asks
// them again in a while (refusedRetry), and is answered once one takes it.
func TestLostRequestRefusedEverywhereAsksAgain(t *testing.T) {
	for _, throttled := range []bool{false, true} {
		t.Run(map[bool]string{false: "dispatch", true: "throttle"}[throttled], func(t *testing.T) { lostRefusedAsksAgain(t, throttled) })
	}
}

func lostRefusedAsksAgain(t *testing.T, throttled bool) {
	synctest.Test(t, func(t *testing.T) {
		var busy atomic.Bool
		c, a, stop := busyPair(t, throttled, &busy, nil)
		defer stop()
		a.freeze()
		res := make(chan []byte, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			ans, err := c.Send(ctx, acr(1, "user@example.net"))
			if err != nil {
				t.Error(err)
			}
			res <- ans
		}()
		time.Sleep(time.Second)
		busy.Store(true)
		a.dropConnections() // lost with a's connection: b, then a again, refuse it
		a.unfreeze()
		time.Sleep(2 * time.Minute)
		busy.Store(false) // the overload ends: the next ask is answered
		select {
		case ans := <-res:
			rc, _ := message.ResultCodeOf(ans)
			assert.Equal(t, uint32(message.Success), rc)
		case <-time.After(time.Minute):
			t.Fatal("still waiting a minute after the overload ended, every peer in service")
		}
	})
}

// Requests lost with their connection and then refused too busy by every
// peer, all at once, ask again together once the overload is over: one
// retry tick for all of them, so they leave in their order, through the
// throttle as without it, not in the order of timers of their own.
func TestLostRequestsRefusedEverywhereAskAgainInOrder(t *testing.T) {
	for _, throttled := range []bool{false, true} {
		t.Run(map[bool]string{false: "dispatch", true: "throttle"}[throttled], func(t *testing.T) {
			for range 10 {
				lostRefusedAskAgainInOrder(t, throttled)
			}
		})
	}
}

func lostRefusedAskAgainInOrder(t *testing.T, throttled bool) {
	synctest.Test(t, func(t *testing.T) {
		var busy atomic.Bool
		var mu sync.Mutex
		var order []uint32 // the record numbers answered 2001, in order
		c, a, stop := busyPair(t, throttled, &busy, func(n uint32) {
			mu.Lock()
			order = append(order, n)
			mu.Unlock()
		})
		defer stop()
		a.freeze()
		const reqs = 6
		var wg sync.WaitGroup
		for i := range reqs {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				if _, err := c.Send(ctx, acr(i, "user@example.net")); err != nil {
					t.Error(err)
				}
			})
			synctest.Wait() // sent in this order
		}
		busy.Store(true)
		a.dropConnections() // lost with a's connection: b, then a again, refuse them
		a.unfreeze()
		time.Sleep(time.Minute)
		busy.Store(false)
		wg.Wait()
		want := make([]uint32, reqs)
		for i := range want {
			want[i] = uint32(i)
		}
		assert.Equal(t, want, order, "asked again in their order")
	})
}

// busyPair starts a Client, primary/secondary and throttled or not, in
// front of a and b, which refuse every request too busy while busy is
// set and answer it otherwise, telling answered (when set) its
// Accounting-Record-Number. stop closes the Client and the network.
func busyPair(t *testing.T, throttled bool, busy *atomic.Bool, answered func(uint32)) (c *Client, a *fakeServer, stop func()) {
	a, b := newFakeServer("a.example.net"), newFakeServer("b.example.net")
	serve := func(f *fakeServer) peer.Handler {
		return func(ctx context.Context, p *peer.Peer, req []byte) []byte {
			if busy.Load() {
				return message.NewAnswer(req).ResultCode(message.TooBusy).
					String(message.OriginHost, 0, true, f.host).
					String(message.OriginRealm, 0, true, "example.net").Bytes()
			}
			if answered != nil {
				n, _ := message.Uint32Of(req, message.AccountingRecordNumber, 0)
				answered(n)
			}
			return f.handler(ctx, p, req)
		}
	}
	a.handle, b.handle = serve(a), serve(b)
	n := network{"tcp://a:3868": a, "tcp://b:3868": b}
	cfg := clientConfig(n, PrimarySecondary, "tcp://a:3868", "tcp://b:3868")
	if throttled {
		cfg.Throttle = &Throttle{}
	}
	c, err := New(cfg)
	if err != nil {
		n.close()
		t.Fatal(err)
	}
	synctest.Wait()
	return c, a, func() {
		c.Close(context.Background())
		n.close()
	}
}
