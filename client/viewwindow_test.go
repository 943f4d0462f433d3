package client

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/throttle"
)

// Nothing leaves the throttle between the scheduler's change to a new
// view and that view's offer to the held requests: a request sent then
// (N) reaches the server that came back after the older replay (R) that
// was held for want of a peer, not ahead of it. Placed in that window, N
// was picked against the view before (b not in it) and the round-robin
// gave it b, which the scheduler already had, while R waited to be put
// back.
//
// a takes R and freezes; b is not there. At a's SUSPECT R can go
// nowhere and is held. b comes up; as the Client stores the view with b,
// N is sent and polled.
func TestThrottleNothingLeavesBeforeTheHeldRequestsSeeTheNewView(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newFakeServer("a.example.net"), newFakeServer("b.example.net")
		b.refuse.Store(true)
		n := network{"tcp://a:1": a, "tcp://b:1": b}
		defer n.close()
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:1", "tcp://b:1")
		cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxOutstanding: 10}}
		// The hooks, set before the Client starts, act once armed.
		var armed atomic.Bool
		var nCall atomic.Pointer[call.Call]
		var c *Client
		var once sync.Once
		var send func(i int)
		onThrottled = func(cl *call.Call) {
			if armed.Load() {
				nCall.CompareAndSwap(nil, cl)
			}
		}
		beforeViewStore = func() {
			if !armed.Load() {
				return
			}
			k := c.ros.Load().all[1].carrier()
			if c.view().open[1] || k == nil || !k.InService() {
				return
			}
			once.Do(func() {
				// The scheduler has b; the view still shows it out.
				send(2) // N
				for {
					c.tmu.Lock()
					cl := nCall.Load()
					done := cl != nil && (c.sched.Len() > 0 || cl.Sends() > 0)
					c.tmu.Unlock()
					if done {
						return // N's poll has run
					}
					runtime.Gosched()
				}
			})
		}
		defer func() { onThrottled, beforeViewStore = nil, nil }()
		c = started(t, cfg)
		time.Sleep(time.Second)
		synctest.Wait()

		var wg sync.WaitGroup
		defer wg.Wait()
		send = func(i int) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				_, err := c.Send(ctx, acr(i, "u@example.net"))
				assert.NoError(t, err, "request %d", i)
			}()
		}
		a.freeze()
		send(1)                      // R
		time.Sleep(70 * time.Second) // a SUSPECT at 2 Tw: R replayed, no peer
		synctest.Wait()
		c.tmu.Lock()
		held := len(c.held)
		c.tmu.Unlock()
		require.Equal(t, 1, held, "R held for want of a peer")

		armed.Store(true)
		b.refuse.Store(false)
		time.Sleep(2 * time.Minute) // b dialed again, in service
		synctest.Wait()
		a.unfreeze()
		got := b.received()
		require.Len(t, got, 2, "R and N at b")
		assert.True(t, got[0].tflag && !got[1].tflag, "b got N before R, which was held when b came back: %+v", got)
	})
}
