package client

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// A replay that no server can take when the queue it waits in is sent
// back (it avoids b's connection, where it was sent, and a and c have
// left service) is held out of the scheduler, not queued for b by the
// scheduler's round-robin. b is full: queued there, it would wait until
// b freed a place (then be released to b, refused as it is placed, given
// back and picked again) or left service, though c came back meanwhile.
// Held, it goes to c at the poll that follows c's return.
//
// b (primary), c and a, one place each. R is sent to b, which freezes;
// at b's failover R is picked for c, whose place X0 (pinned to c) holds,
// and waits in c's queue. b thaws, on the same connection, and X1 takes
// its place. a leaves service, then c (SUSPECT): c's queue is sent back,
// and R can go nowhere. c comes back while b stays full.
func TestThrottleReplayNoServerCanTakeIsHeldNotQueuedForAServerItAvoids(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, c := newFakeServer("a.example.net"), newFakeServer("b.example.net"), newFakeServer("c.example.net")
		n := network{"tcp://a:1": a, "tcp://b:1": b, "tcp://c:1": c}
		defer n.close()
		// b never answers R (lost in the server: no late answer from b
		// completes it) and holds X1's answer until bGate.
		bGate := make(chan struct{})
		b.handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte {
			if recordNumber(req) >= 100 {
				select {
				case <-bGate:
				case <-ctx.Done():
				}
				return b.handler(ctx, p, req)
			}
			<-ctx.Done()
			return nil
		}
		openB := sync.OnceFunc(func() { close(bGate) })
		releaseC := holdAnswers(c) // X0 hangs at c
		var wg sync.WaitGroup
		defer wg.Wait()
		defer releaseC()
		defer openB()
		var aDown atomic.Bool
		cfg := clientConfig(n, PrimarySecondary, "tcp://b:1", "tcp://c:1", "tcp://a:1")
		cfg.Peer.Dialer = func(ctx context.Context, url string) (transport.Conn, error) {
			if url == "tcp://a:1" && aDown.Load() {
				return nil, errors.New("refused")
			}
			return n.dialer(ctx, url)
		}
		cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxOutstanding: 1}}
		cl := started(t, cfg)
		waitOkay(t, cl)
		idx := map[string]int{}
		for i, m := range cl.view().ros.all {
			idx[m.spec.Name] = i
		}
		ib, ic := idx["b.example.net"], idx["c.example.net"]

		send := func(req []byte) {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				cl.Send(ctx, req)
			})
			synctest.Wait()
		}
		send(acrTo(0, "x0@example.net", "c.example.net")) // X0: c's place
		require.Len(t, c.received(), 1, "X0 went to c")
		b.freeze()
		send(acr(1, "r@example.net")) // R: to b, which reads nothing
		time.Sleep(70 * time.Second)  // b SUSPECT at 2 Tw: R moves, picked for c
		synctest.Wait()
		require.Equal(t, 1, depth(cl, ic), "R waits in c's queue")
		b.unfreeze() // OKAY again, on the connection R was sent on
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, watchdog.Okay, cl.view().state[ib], "b is back")
		require.Len(t, b.received(), 1, "b read R")
		r := b.received()[0].e2e
		send(acr(100, "x1@example.net")) // X1: b's place
		require.Len(t, b.received(), 2, "X1 went to b")

		aDown.Store(true)
		a.dropConnections()
		time.Sleep(time.Second)
		synctest.Wait()
		require.False(t, cl.view().open[idx["a.example.net"]], "a is out of service")
		c.freeze()
		time.Sleep(70 * time.Second) // c SUSPECT: X0 fails (pinned), c's queue is sent back
		synctest.Wait()
		require.False(t, cl.view().open[ic], "c is out of service")
		t.Logf("c out of service: b's queue %d deep, %d held", depth(cl, ib), len(cl.held))
		c.unfreeze()
		for start := time.Now(); !cl.view().takes[ic]; time.Sleep(time.Millisecond) {
			require.Less(t, time.Since(start), time.Minute, "c is back")
		}
		back := time.Now()
		arrived := func() bool {
			for _, s := range c.received() {
				if s.e2e == r {
					return true
				}
			}
			return false
		}
		const patience = 10 * time.Second
		for !arrived() && time.Since(back) < patience {
			time.Sleep(time.Millisecond)
		}
		if arrived() {
			d := time.Since(back)
			t.Logf("R reached c %v after c came back", d)
			if d > giveBackRetry {
				t.Errorf("R reached c %v after c came back, want at once", d)
			}
			return
		}
		bDepth := depth(cl, ib)
		openB() // b frees its place: R is released to b, refused, given back, and goes to c
		for !arrived() && time.Since(back) < time.Hour {
			time.Sleep(time.Millisecond)
		}
		t.Errorf("R did not reach c when c came back (b full, its queue %d deep): it reached c %v after c came back, once b freed its place (%v after): it waited in b's queue, where the scheduler's round-robin put it though it must avoid b, instead of being held for c",
			bDepth, time.Since(back), patience)
	})
}

// recordNumber returns an ACR's Accounting-Record-Number (acr's n).
func recordNumber(req []byte) uint32 {
	v, ok := wire.FindAVP(req, message.AccountingRecordNumber, 0)
	if !ok || len(v) < 4 {
		return 0
	}
	return binary.BigEndian.Uint32(v)
}

// depth returns the depth of the throttle queue of member i.
func depth(c *Client, i int) int {
	c.tmu.Lock()
	defer c.unlockThrottle()
	return c.sched.Depth(i)
}
