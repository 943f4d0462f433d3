package client

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/throttle"
)

// A refusal (DIAMETER_TOO_BUSY, a premature failover) read on another
// goroutine while the throttle's execute is still placing the refused
// send is recorded where the request really goes: b -> c when it leaves
// the throttle's queue for c, and no "b -> b" record for the send to b
// that was refused. execute read the request's movedFrom after its
// place, so it took the refusal's own mark (set by onFailover meanwhile)
// for the move of the send it had just made, and the move to c, found
// unmarked, had no record.
func TestThrottleRefusalDuringPlaceRecordsTheRealMove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, cs := newFakeServer("b.example.net"), newFakeServer("c.example.net")
		var busy atomic.Bool
		busy.Store(true)
		busyWhile(b, &busy, nil, nil)
		n := network{"tcp://b:1": b, "tcp://c:1": cs}
		defer n.close()
		cfg := clientConfig(n, PrimarySecondary, "tcp://b:1", "tcp://c:1")
		cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxOutstanding: 100}}

		// The first send (to b) stays in execute's place until b's
		// refusal was read and handed to onFailover on the peer's
		// goroutines.
		var c *Client
		var first atomic.Bool
		raced := false
		marked := func(cl *call.Call) bool { // onFailover marked it as moved off b
			it, ok := cl.Holder().(*item)
			if !ok {
				return false
			}
			c.tmu.Lock()
			defer c.unlockThrottle()
			return it.movedFrom != nil && it.movedFrom.spec.Name == "b.example.net"
		}
		beforeSent = func(calls []*call.Call) {
			if !first.CompareAndSwap(false, true) {
				return
			}
			for range 100 {
				time.Sleep(time.Millisecond) // every other goroutine runs until it waits
				if calls[0].LeftRefused() && marked(calls[0]) {
					raced = true
					return
				}
			}
		}
		defer func() { beforeSent = nil }()

		var err error
		c, err = New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)

		ans, err := c.Send(context.Background(), acr(1, "user@example.net"))
		require.NoError(t, err)
		require.NotEmpty(t, ans)
		synctest.Wait()
		require.True(t, raced, "b's refusal was read while the send to b was being placed")
		require.Len(t, b.received(), 1, "sent to b once")
		got := cs.received()
		require.Len(t, got, 1, "then to c")
		id := got[0].e2e

		recs, _ := c.FailoverLog()
		var toC int
		for _, r := range recs {
			named := slices.Contains(r.EndToEnd, id)
			assert.False(t, r.Outcome == Moved && r.From == r.To, "a record of a move to where the request was: %+v", r)
			if named && r.Outcome == Moved && r.From == "b.example.net" && r.To == "c.example.net" {
				toC++
			}
		}
		assert.Equal(t, 1, toC, "one record of the move b -> c naming the request: %+v", recs)
	})
}
